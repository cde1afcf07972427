package httpapi

import (
	"bufio"
	"io"
	"mime"
	"net/http"
)

// Cross-site request forgery. In open mode every caller is an operator, and
// a browser will send a request to the listener from any page its user
// opens: a foreign page could pause a lane or cancel jobs by posting a form
// to 127.0.0.1:8080. Two checks close that. Both leave clients that are
// not browsers (curl, the CLI, SDKs) as they are.
//
//   - A state-changing request (POST, PUT, PATCH, DELETE) a browser marks as
//     coming from another site or origin (Sec-Fetch-Site, or an Origin header
//     whose host is not the request's Host) is refused with 403 on every
//     route of the listener: the REST API, /proxy, MCP and A2A alike. The
//     dashboard at /ui/ is same-origin and unaffected.
//   - An operator POST with a body must declare it JSON (415 otherwise): a
//     form can only send application/x-www-form-urlencoded, multipart or
//     text/plain, and a cross-origin fetch with application/json needs a
//     CORS preflight, which this API never grants. POST /jobs keeps
//     accepting bodies without a Content-Type, as it always has; the origin
//     check covers it.

// crossOriginRefused is the error of a refused cross-origin request.
const crossOriginRefused = "cross-origin request refused"

// crossOrigin refuses state-changing requests from other origins
// (net/http's CrossOriginProtection, answering with the API's JSON error).
func crossOrigin(next http.Handler) http.Handler {
	p := http.NewCrossOriginProtection()
	p.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusForbidden, crossOriginRefused)
	}))
	return p.Handler(next)
}

// jsonBody refuses a POST whose body is not declared application/json. A
// POST without a body (resume, a retry of one job) needs no Content-Type.
func jsonBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && !isJSON(r.Header.Get("Content-Type")) && hasBody(r) {
			w.Header().Set("Accept-Post", "application/json")
			writeError(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// hasBody reports whether r carries a body, peeking one byte when its
// length is not declared (a chunked body may still be empty); the byte is
// put back for the handler.
func hasBody(r *http.Request) bool {
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		return false
	case r.ContentLength > 0:
		return true
	}
	br := bufio.NewReaderSize(r.Body, 16)
	_, err := br.Peek(1)
	r.Body = struct {
		io.Reader
		io.Closer
	}{br, r.Body}
	return err == nil
}
