package httpkit

// A job request is decoded on every submission, and encoding/json's
// reflection costs more there than the rest of the request's handling
// outside the store. decodeFast reads the common shape of a request
// directly — a flat object of the plain string fields plus a headers
// object of strings — and declines anything else, which then goes through
// encoding/json as before. It never answers differently: it accepts only
// input for which encoding/json would succeed with the same result
// (FuzzDecodeFastMatchesEncodingJSON).

// fastDecoder is implemented by request types with a reflection-free
// decoder for their common shape. decodeFast returns false, leaving the
// receiver untouched, for any input it does not handle.
type fastDecoder interface {
	decodeFast(raw []byte) bool
}

// decodeFast implements fastDecoder. It handles the fields of
// JobRequestJSON that are plain strings (and priority, traceparent and
// tracestate among the options) and headers; keys must be spelled exactly
// as documented and appear once; strings may use the short escapes (\" \\
// \/ \b \f \n \r \t) but not \u (encoding/json's treatment of lone
// surrogates is its own). Anything else — another key, a null, a number, a
// duplicate, the other options — declines. raw has been checked for
// UTF-8 by the caller.
func (in *JobRequestJSON) decodeFast(raw []byte) bool {
	d := fastDec{b: raw}
	var out JobRequestJSON
	var seen uint16
	d.ws()
	if !d.eat('{') {
		return false
	}
	d.ws()
	if d.eat('}') {
		return d.end() && in.set(&out)
	}
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		d.ws()
		if !d.eat(':') {
			return false
		}
		d.ws()
		var field *string
		var bit uint16
		switch string(key) {
		case "user_id":
			field, bit = &out.UserID, 1<<0
		case "idempotent_key":
			field, bit = &out.IdempotentKey, 1<<1
		case "url":
			field, bit = &out.URL, 1<<2
		case "pool_id":
			field, bit = &out.PoolID, 1<<3
		case "method":
			field, bit = &out.Method, 1<<4
		case "body":
			field, bit = &out.Body, 1<<5
		case "webhook_url":
			field, bit = &out.WebhookURL, 1<<6
		case "priority":
			field, bit = &out.Priority, 1<<7
		case "traceparent":
			field, bit = &out.TraceParent, 1<<8
		case "tracestate":
			field, bit = &out.TraceState, 1<<9
		case "headers":
			bit = 1 << 10
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if field != nil {
			if *field, ok = d.str(); !ok {
				return false
			}
		} else if out.Headers, ok = d.headers(); !ok {
			return false
		}
		d.ws()
		if d.eat('}') {
			return d.end() && in.set(&out)
		}
		if !d.eat(',') {
			return false
		}
		d.ws()
	}
}

func (in *JobRequestJSON) set(out *JobRequestJSON) bool {
	*in = *out
	return true
}

// fastDec reads JSON from b at i.
type fastDec struct {
	b []byte
	i int
}

func (d *fastDec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDec) eat(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (d *fastDec) end() bool {
	d.ws()
	return d.i == len(d.b)
}

// key reads an object key without escapes, as bytes of b.
func (d *fastDec) key() ([]byte, bool) {
	if !d.eat('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// str reads a string value with at most the short escapes.
func (d *fastDec) str() (string, bool) {
	if !d.eat('"') {
		return "", false
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return string(d.b[start : d.i-1]), true
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", false
		}
		d.i++
	}
	return "", false
}

// escaped finishes a string that began at start and has an escape at d.i.
func (d *fastDec) escaped(start int) (string, bool) {
	buf := make([]byte, d.i-start, len(d.b)-start)
	copy(buf, d.b[start:d.i])
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(buf), true
		case c < 0x20:
			return "", false
		case c != '\\':
			buf = append(buf, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return "", false
		}
		switch d.b[d.i+1] {
		case '"':
			buf = append(buf, '"')
		case '\\':
			buf = append(buf, '\\')
		case '/':
			buf = append(buf, '/')
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		default: // \u and anything invalid: encoding/json's to judge
			return "", false
		}
		d.i += 2
	}
	return "", false
}

// headers reads an object of strings into a new map (empty for {}, as
// encoding/json makes it). A key given twice declines: encoding/json keeps
// the last, but a decoder that never has to think about it is simpler.
func (d *fastDec) headers() (map[string]string, bool) {
	if !d.eat('{') {
		return nil, false
	}
	h := make(map[string]string, 4)
	d.ws()
	if d.eat('}') {
		return h, true
	}
	for {
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.ws()
		if !d.eat(':') {
			return nil, false
		}
		d.ws()
		v, ok := d.str()
		if !ok {
			return nil, false
		}
		if _, dup := h[k]; dup {
			return nil, false
		}
		h[k] = v
		d.ws()
		if d.eat('}') {
			return h, true
		}
		if !d.eat(',') {
			return nil, false
		}
		d.ws()
	}
}
