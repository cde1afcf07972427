package domain

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// DestinationRules are one set of destination rules as configured: globally,
// or for one tenant. Entries are host names ("api.example.com"), wildcard
// suffixes ("*.example.com": every subdomain, not example.com itself), IP
// addresses ("10.1.2.3", "::1") and CIDR ranges ("10.0.0.0/8", "fd00::/8").
// Names are case-insensitive and a trailing dot is ignored.
type DestinationRules struct {
	// Allow, when not empty, is the only way out: a destination passes only
	// if its host name matches a name entry or its address an IP/CIDR entry.
	// An IP/CIDR entry lying inside a built-in or deny_private range (say
	// 169.254.169.254 or 10.1.0.0/16) also lifts that denial for the
	// addresses it covers; a wider entry (0.0.0.0/0) does not.
	Allow []string
	// Deny refuses matching destinations, whatever Allow says.
	Deny []string
	// DenyPrivate refuses loopback, RFC 1918, CGNAT, IPv6 unique-local and
	// site-local, and link-local multicast addresses.
	DenyPrivate bool
}

// Validate reports every invalid entry, each named.
func (r DestinationRules) Validate() error {
	_, err := compileRules(r)
	return err
}

// DestinationPolicy decides which destinations Aquifer may send requests to.
// It is immutable and safe for concurrent use. A nil *DestinationPolicy is
// the default policy: the built-in denials and nothing else.
type DestinationPolicy struct {
	sets []ruleSet
	key  string
}

// NewDestinationPolicy compiles global and any further rule sets (a tenant's)
// into one policy. A destination must pass every rule set; the built-in
// denials (link-local and cloud metadata addresses and names) apply once and
// are lifted only by an allow entry in any of the sets that names the address
// or a range inside the denied one. Invalid entries are reported together.
func NewDestinationPolicy(global DestinationRules, more ...DestinationRules) (*DestinationPolicy, error) {
	p := &DestinationPolicy{}
	var errs []error
	keys := make([]string, 0, 1+len(more))
	for _, r := range append([]DestinationRules{global}, more...) {
		s, err := compileRules(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.sets = append(p.sets, s)
		keys = append(keys, s.key())
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p.key = strings.Join(keys, " + ")
	return p, nil
}

// defaultPolicy is what a nil *DestinationPolicy means.
var defaultPolicy = &DestinationPolicy{sets: []ruleSet{{}}, key: (&ruleSet{}).key()}

func (p *DestinationPolicy) orDefault() *DestinationPolicy {
	if p == nil {
		return defaultPolicy
	}
	return p
}

// String describes the policy canonically: two policies with the same string
// admit exactly the same destinations (so it can key a cache of connection
// pools).
func (p *DestinationPolicy) String() string { return p.orDefault().key }

// CheckURL checks the host of an absolute URL at submission, as CheckHost
// does; a refusal names field (for example "url", "webhook_url", "address").
func (p *DestinationPolicy) CheckURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return Invalid(field, "%s is not a valid URL", field)
	}
	return p.CheckURLHost(field, u.Hostname())
}

// CheckURLHost is CheckURL for a URL already parsed: host is its
// url.URL.Hostname.
func (p *DestinationPolicy) CheckURLHost(field, host string) error {
	if err := p.CheckHost(host); err != nil {
		var d *DestinationDeniedError
		if errors.As(err, &d) {
			switch d.Rule {
			case ruleBadIPv4:
				return Invalid(field, "%s: host %s is not a valid IPv4 address", field, d.Host)
			case ruleOddIPv4:
				return Invalid(field, "%s: host %s is the IPv4 address %s in a non-standard form; write it as %s",
					field, d.Host, d.IP, d.IP)
			}
			d.Field = field
		}
		return err
	}
	return nil
}

// CheckHost checks what can be known before any lookup: a literal IP address
// is checked fully; a host name is checked against the name rules, and
// refused when an allow list that has no IP or CIDR entries does not name
// it. Whatever passes is checked again, address by address, at dial time.
//
// A host ending in a number ("2852039166", "0xa9fea9fe", "0251.0376.0251.0376",
// "169.254.43518", "0") is an IPv4 address in the forms inet_aton accepts,
// which many clients and servers read as the address it spells: it is
// checked as that address (a refusal names the address in its dotted form),
// and refused anyway if the rules admit it, as Aquifer itself would look it
// up as a name; one that spells no address is refused as invalid.
// A refusal is a *DestinationDeniedError.
func (p *DestinationPolicy) CheckHost(host string) error {
	name := normalizeHost(host)
	if a, err := netip.ParseAddr(name); err == nil {
		return p.CheckIP(host, a)
	}
	if a, numeric := parseIPv4Number(name); numeric {
		if !a.IsValid() {
			return &DestinationDeniedError{Host: name, Rule: ruleBadIPv4}
		}
		if err := p.CheckIP(a.String(), a); err != nil {
			return err
		}
		return &DestinationDeniedError{Host: name, IP: a, Rule: ruleOddIPv4}
	}
	if name == "" {
		return &DestinationDeniedError{Host: host, Rule: "no host"}
	}
	if rule := p.orDefault().decide(name, netip.Addr{}); rule != "" {
		return &DestinationDeniedError{Host: name, Rule: rule}
	}
	return nil
}

// CheckIP checks one address host resolved to, at dial time, just before
// connecting to it: the name rules for host (unless it is a literal address)
// and every address rule for ip. IPv4-mapped IPv6 addresses are checked as
// the IPv4 address they carry, and addresses in the NAT64 prefix
// 64:ff9b::/96 as both forms. A refusal is a *DestinationDeniedError.
func (p *DestinationPolicy) CheckIP(host string, ip netip.Addr) error {
	name := normalizeHost(host)
	shown := name
	if _, err := netip.ParseAddr(name); err == nil {
		name = "" // a literal address has no name to match
	}
	if !ip.IsValid() {
		return &DestinationDeniedError{Host: shown, Rule: "no address"}
	}
	if rule := p.orDefault().decide(name, ip); rule != "" {
		return &DestinationDeniedError{Host: shown, IP: ip.WithZone("").Unmap(), Rule: rule}
	}
	return nil
}

// DestinationDeniedError is a destination refused by a DestinationPolicy.
// At submission it is the caller's mistake (CodeInvalid); at dial time it
// fails the attempt for good — sending again cannot succeed.
type DestinationDeniedError struct {
	Field string     // the request field, when known ("url", "webhook_url", "address")
	Host  string     // the host as given, lower-cased
	IP    netip.Addr // the refused address; invalid when the name itself was refused
	Rule  string     // why, for example "link-local / cloud metadata address"
}

func (e *DestinationDeniedError) Error() string { return e.message(true) }

func (e *DestinationDeniedError) code() Code { return CodeInvalid }

// public leaves out the address a host name resolved to: callers learn
// which rule refused their destination, not how Aquifer's resolver sees it.
func (e *DestinationDeniedError) public() string { return e.message(false) }

func (e *DestinationDeniedError) message(withIP bool) string {
	dest := e.Host
	switch {
	case dest == "" && e.IP.IsValid():
		dest = e.IP.String()
	case e.IP.IsValid() && dest != e.IP.String():
		if _, err := netip.ParseAddr(dest); err == nil || withIP {
			dest += " (" + e.IP.String() + ")"
		}
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: destination %s is denied: %s", e.Field, dest, e.Rule)
	}
	return fmt.Sprintf("destination %s is denied: %s", dest, e.Rule)
}

// Reasons a destination is refused, as DestinationDeniedError.Rule says.
const (
	ruleUnspecified = "unspecified address"
	ruleMetadata    = "link-local / cloud metadata address"
	ruleMetaName    = "cloud metadata host name"
	rulePrivate     = "private or loopback address (deny_private)"
	ruleNotAllowed  = "not in the allow list"
	ruleBadIPv4     = "not a valid IPv4 address"
	ruleOddIPv4     = "IPv4 address in a non-standard form"
)

// parseIPv4Number reads a host that ends in a number (its last label is
// decimal digits, or hex digits after "0x") as inet_aton does: one to four
// parts, each decimal, octal (a leading 0) or hex (0x); the last part fills
// the bytes the others leave ("169.254.43518" is 169.254.169.254,
// "2852039166" is too). numeric is false for anything else, such as host
// names and IPv6 literals; addr is invalid when the host ends in a number
// but spells no IPv4 address ("1.2.3.4.5", "256.1.1.1", "08").
func parseIPv4Number(host string) (addr netip.Addr, numeric bool) {
	parts := strings.Split(host, ".")
	if !numberLike(parts[len(parts)-1]) {
		return netip.Addr{}, false
	}
	if len(parts) > 4 {
		return netip.Addr{}, true
	}
	var v uint64
	for i, part := range parts {
		n, ok := parseIPv4Part(part)
		last := i == len(parts)-1
		if !ok || !last && n > 0xff || last && n >= 1<<(8*(5-len(parts))) {
			return netip.Addr{}, true
		}
		if last {
			v = v<<(8*(5-len(parts))) | n
		} else {
			v = v<<8 | n
		}
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// numberLike reports whether a label is a number for parseIPv4Number:
// decimal digits, or "0x" and hex digits.
func numberLike(label string) bool {
	if rest, ok := strings.CutPrefix(label, "0x"); ok {
		return strings.Trim(rest, "0123456789abcdef") == ""
	}
	return label != "" && strings.Trim(label, "0123456789") == ""
}

// parseIPv4Part reads one part: hex after "0x" ("0x" alone is 0), octal
// with a leading 0, decimal otherwise; at most 32 bits.
func parseIPv4Part(part string) (uint64, bool) {
	base, digits := 10, part
	switch {
	case strings.HasPrefix(part, "0x"):
		base, digits = 16, part[2:]
		if digits == "" {
			return 0, true
		}
	case len(part) > 1 && part[0] == '0':
		base, digits = 8, part[1:]
	}
	if digits == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, base, 32)
	return n, err == nil
}

// alwaysDenied are never reachable, whatever the rules say.
var alwaysDenied = prefixes("0.0.0.0/8", "::/128")

// builtinDenied are refused unless an allow entry inside them names them.
var builtinDenied = prefixes(
	"169.254.0.0/16",     // IPv4 link-local: AWS, GCP, Azure, OpenStack metadata
	"fe80::/10",          // IPv6 link-local
	"fd00:ec2::254/128",  // AWS metadata over IPv6
	"100.100.100.200/32", // Alibaba Cloud metadata
)

// builtinDeniedNames are metadata host names refused unless allowed by name.
var builtinDeniedNames = map[string]bool{"metadata.google.internal": true, "metadata": true}

// privateRanges are what DenyPrivate refuses.
var privateRanges = prefixes(
	"127.0.0.0/8", "::1/128", // loopback
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", // RFC 1918
	"100.64.0.0/10",         // CGNAT (RFC 6598)
	"fc00::/7", "fec0::/10", // unique-local, deprecated site-local
	"224.0.0.0/24", "ff02::/16", // link-local multicast
)

// nat64 is the well-known NAT64 prefix (RFC 6052): 64:ff9b::a9fe:a9fe
// reaches 169.254.169.254 through a NAT64 gateway.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

func prefixes(list ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(list))
	for i, s := range list {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// decide returns why the destination (name, which may be empty; addr, which
// may be invalid at submission) is refused, or "" if it passes.
func (p *DestinationPolicy) decide(name string, addr netip.Addr) string {
	var addrs []netip.Addr
	if addr.IsValid() {
		a := addr.WithZone("").Unmap()
		addrs = append(addrs, a)
		if nat64.Contains(a) {
			b := a.As16()
			addrs = append(addrs, netip.AddrFrom4([4]byte(b[12:])))
		}
	}
	for _, a := range addrs {
		if containing(alwaysDenied, a).IsValid() {
			return ruleUnspecified
		}
		if r := containing(builtinDenied, a); r.IsValid() && !p.lifted(a, r) {
			return ruleMetadata
		}
	}
	if builtinDeniedNames[name] && !p.namedInAllow(name) {
		return ruleMetaName
	}
	for i := range p.sets {
		if rule := p.sets[i].decide(name, addrs); rule != "" {
			return rule
		}
	}
	return ""
}

// lifted reports whether any set's allow list has an entry for a lying
// inside the denied range r.
func (p *DestinationPolicy) lifted(a netip.Addr, r netip.Prefix) bool {
	for i := range p.sets {
		if p.sets[i].allow.lifts(a, r) {
			return true
		}
	}
	return false
}

func (p *DestinationPolicy) namedInAllow(name string) bool {
	for i := range p.sets {
		if _, ok := p.sets[i].allow.names[name]; ok {
			return true
		}
	}
	return false
}

func containing(list []netip.Prefix, a netip.Addr) netip.Prefix {
	for _, r := range list {
		if r.Contains(a) {
			return r
		}
	}
	return netip.Prefix{}
}

// ruleSet is one compiled DestinationRules.
type ruleSet struct {
	allow, deny matcher
	denyPrivate bool
}

func compileRules(r DestinationRules) (ruleSet, error) {
	var errs []error
	s := ruleSet{denyPrivate: r.DenyPrivate}
	for _, e := range r.Allow {
		if err := s.allow.add(e); err != nil {
			errs = append(errs, Invalid("allow", "allow entry %q: %v", e, err))
		}
	}
	for _, e := range r.Deny {
		if err := s.deny.add(e); err != nil {
			errs = append(errs, Invalid("deny", "deny entry %q: %v", e, err))
		}
	}
	return s, errors.Join(errs...)
}

func (s *ruleSet) decide(name string, addrs []netip.Addr) string {
	if name != "" {
		if e, ok := s.deny.matchName(name); ok {
			return fmt.Sprintf("matches deny entry %q", e)
		}
	}
	for _, a := range addrs {
		if e, ok := s.deny.matchAddr(a); ok {
			return fmt.Sprintf("matches deny entry %q", e)
		}
	}
	if s.denyPrivate {
		for _, a := range addrs {
			if r := containing(privateRanges, a); r.IsValid() && !s.allow.lifts(a, r) {
				return rulePrivate
			}
		}
	}
	if s.allow.empty() {
		return ""
	}
	if _, ok := s.allow.matchName(name); ok && name != "" {
		return ""
	}
	for _, a := range addrs {
		if _, ok := s.allow.matchAddr(a); ok {
			return ""
		}
	}
	if len(addrs) == 0 && len(s.allow.prefixes) > 0 {
		return "" // a name an address entry may admit: decided at dial time
	}
	return ruleNotAllowed
}

func (s *ruleSet) key() string {
	return fmt.Sprintf("allow=%v deny=%v deny_private=%t", s.allow.entries(), s.deny.entries(), s.denyPrivate)
}

// matcher holds one list of entries.
type matcher struct {
	names    map[string]struct{} // exact names
	suffixes []string            // ".example.com" for "*.example.com"
	prefixes []netip.Prefix
}

func (m *matcher) empty() bool {
	return len(m.names) == 0 && len(m.suffixes) == 0 && len(m.prefixes) == 0
}

// add parses one entry: a CIDR, an IP address, "*.suffix" or a host name.
func (m *matcher) add(entry string) error {
	e := normalizeHost(strings.TrimSpace(entry))
	if e == "" {
		return errors.New("empty entry")
	}
	if strings.Contains(e, "://") {
		return errors.New("a URL; give its host name alone")
	}
	if strings.Contains(e, "/") {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return errors.New("not a valid CIDR range (like 10.0.0.0/8 or fd00::/8)")
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		m.prefixes = append(m.prefixes, p.Masked())
		return nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		if a.Zone() != "" {
			return errors.New("an address with a zone (%) cannot be matched; give the address alone")
		}
		a = a.Unmap()
		m.prefixes = append(m.prefixes, netip.PrefixFrom(a, a.BitLen()))
		return nil
	}
	if rest, ok := strings.CutPrefix(e, "*."); ok {
		if err := checkHostName(rest); err != nil {
			return err
		}
		m.suffixes = append(m.suffixes, "."+rest)
		return nil
	}
	if err := checkHostName(e); err != nil {
		return err
	}
	if m.names == nil {
		m.names = map[string]struct{}{}
	}
	m.names[e] = struct{}{}
	return nil
}

func (m *matcher) matchName(name string) (string, bool) {
	if name == "" {
		return "", false
	}
	if _, ok := m.names[name]; ok {
		return name, true
	}
	for _, s := range m.suffixes {
		if strings.HasSuffix(name, s) {
			return "*" + s, true
		}
	}
	return "", false
}

func (m *matcher) matchAddr(a netip.Addr) (string, bool) {
	for _, p := range m.prefixes {
		if p.Contains(a) {
			return entryString(p), true
		}
	}
	return "", false
}

// lifts reports whether an entry covers a while lying inside r: only such an
// explicit entry opens a built-in or deny_private range.
func (m *matcher) lifts(a netip.Addr, r netip.Prefix) bool {
	for _, p := range m.prefixes {
		if p.Contains(a) && p.Bits() >= r.Bits() {
			return true
		}
	}
	return false
}

// entries lists the matcher's entries sorted and without duplicates.
func (m *matcher) entries() []string {
	var out []string
	for n := range m.names {
		out = append(out, n)
	}
	for _, s := range m.suffixes {
		out = append(out, "*"+s)
	}
	for _, p := range m.prefixes {
		out = append(out, p.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func entryString(p netip.Prefix) string {
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String()
	}
	return p.String()
}

// normalizeHost lower-cases host, drops IPv6 brackets and a trailing dot.
func normalizeHost(host string) string {
	h := strings.ToLower(host)
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	return strings.TrimSuffix(h, ".")
}

// checkHostName accepts DNS names in ASCII (punycode for IDNs): labels of
// letters, digits, '-' and '_', 1–63 bytes each, 253 bytes in all.
func checkHostName(name string) error {
	const hint = "not a host name, IP address or CIDR range (no scheme, port or path; wildcards only as a leading \"*.\")"
	if len(name) > 253 {
		return errors.New("host name longer than 253 bytes")
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return errors.New(hint)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c >= 0x80 {
					return errors.New("non-ASCII host name; give its punycode (xn--) form")
				}
				return errors.New(hint)
			}
		}
	}
	return nil
}

type policyKey struct{}

// WithDestinationPolicy returns ctx carrying p: outbound requests made with
// it are checked against p (at dial time) instead of the global policy.
func WithDestinationPolicy(ctx context.Context, p *DestinationPolicy) context.Context {
	if p == nil {
		return ctx
	}
	return context.WithValue(ctx, policyKey{}, p)
}

// DestinationPolicyFrom returns the policy in ctx, or nil.
func DestinationPolicyFrom(ctx context.Context) *DestinationPolicy {
	p, _ := ctx.Value(policyKey{}).(*DestinationPolicy)
	return p
}
