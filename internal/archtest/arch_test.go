// Package archtest enforces Aquifer's architecture mechanically: imports
// point inward (domain ← ports ← app ← adapters ← cmd/pkg), adapters never
// import each other, the leaf libraries stay leaves, and only
// internal/config and cmd read the environment or exit the process.
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/aquiferhq/aquifer"

type pkgFiles struct {
	dir     string // relative to the module root, slash-separated
	imports map[string][]string
	files   []*ast.File
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s", dir)
	}
	return dir
}

// load parses every non-test Go file of the module, grouped by directory.
func load(t *testing.T) map[string]*pkgFiles {
	t.Helper()
	base := root(t)
	pkgs := map[string]*pkgFiles{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != base && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "data" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		p := pkgs[rel]
		if p == nil {
			p = &pkgFiles{dir: rel, imports: map[string][]string{}}
			pkgs[rel] = p
		}
		p.files = append(p.files, f)
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			p.imports[ip] = append(p.imports[ip], filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func internalPath(ip string) (string, bool) {
	if ip == module {
		return ".", true
	}
	rest, ok := strings.CutPrefix(ip, module+"/")
	return rest, ok
}

func isStdlib(ip string) bool {
	first, _, _ := strings.Cut(ip, "/")
	return !strings.Contains(first, ".")
}

func under(dir, prefix string) bool { return dir == prefix || strings.HasPrefix(dir, prefix+"/") }

// adapterOf returns the adapter a directory belongs to, e.g.
// "internal/adapters/outbound/sqlite".
func adapterOf(dir string) string {
	parts := strings.Split(dir, "/")
	if len(parts) >= 4 && parts[0] == "internal" && parts[1] == "adapters" {
		return strings.Join(parts[:4], "/")
	}
	return ""
}

// sharedInbound is a library for inbound HTTP adapters, which they may all
// import; it imports no adapter itself.
const sharedInbound = "internal/adapters/inbound/httpkit"

// importRules: for each directory prefix, the internal packages it may
// import (prefixes; "=" before one means that package exactly), or none
// outside the standard library (and the few named in also, exactly).
var importRules = []struct {
	dir        string
	allowed    []string
	stdlibOnly bool
	also       []string
}{
	{dir: "internal/domain", stdlibOnly: true},
	{dir: "internal/pacing", stdlibOnly: true},
	// l8 signs every delivery: its Ed25519 signatures are made from
	// curve25519-voi's group and scalar arithmetic (sign.go: half the time
	// of the standard library's), which it uses and nothing else does.
	{dir: "internal/l8", stdlibOnly: true, also: []string{
		"github.com/oasisprotocol/curve25519-voi/curve",
		"github.com/oasisprotocol/curve25519-voi/curve/scalar",
	}},
	{dir: "internal/groupcommit", stdlibOnly: true},
	{dir: "internal/ports", allowed: []string{"internal/domain", "internal/l8"}},
	// The application core: a façade over one package per concept. Each
	// package imports only what is below it; cross-cutting needs come
	// in through interfaces the consumer declares (dispatch.Ownership,
	// lease.Lanes, edge.Intake, …), never by importing the provider.
	{dir: "internal/app", allowed: []string{"internal/domain", "internal/ports", "internal/pacing", "internal/l8", "internal/app"}},
	{dir: "internal/app/events", allowed: []string{"internal/domain", "internal/ports"}},
	{dir: "internal/app/admit", allowed: []string{"internal/domain", "internal/ports"}},
	{dir: "internal/app/load", allowed: []string{"internal/domain", "internal/ports"}},
	{dir: "internal/app/tenant", allowed: []string{"internal/domain", "internal/ports", "internal/l8"}},
	{dir: "internal/app/pool", allowed: []string{"internal/domain", "internal/ports", "internal/pacing"}},
	{dir: "internal/app/trust", allowed: []string{"internal/domain", "internal/ports", "internal/l8"}},
	{dir: "internal/app/lease", allowed: []string{"internal/domain", "internal/ports"}},
	{dir: "internal/app/drain", allowed: []string{"internal/domain", "internal/ports", "internal/l8"}},
	{dir: "internal/app/ops", allowed: []string{"internal/domain", "internal/ports"}},
	{dir: "internal/app/schedule", allowed: []string{"internal/domain", "internal/ports"}},
	{dir: "internal/app/dispatch", allowed: []string{"internal/domain", "internal/ports", "internal/pacing",
		"internal/app/load", "internal/app/pool"}},
	{dir: "internal/app/edge", allowed: []string{"internal/domain", "internal/ports", "internal/pacing",
		"internal/app/dispatch", "internal/app/events", "internal/app/load"}},
	{dir: "internal/storetest", allowed: []string{"internal/domain", "internal/ports"}},
	{dir: "internal/storekit", allowed: []string{"internal/domain", "internal/ports", "internal/groupcommit"}},
	{dir: "internal/clocktest", allowed: []string{"internal/ports"}},
	// Settings are read into the types that use them: the Tenant type and
	// its check are the core's (app/tenant), the L8 key's and webhook
	// secrets' check is l8's, so each is checked in one place.
	{dir: "internal/config", allowed: []string{"internal/domain", "internal/l8", "=internal/app/tenant"}},
	{dir: sharedInbound, allowed: []string{"internal/domain", "=internal/app"}},
	// Adapters talk to the core through its façade, not its packages.
	{dir: "internal/adapters", allowed: []string{"internal/domain", "internal/ports", "=internal/app", "internal/pacing", "internal/l8",
		"internal/groupcommit", "internal/storekit"}},
}

func TestImportsPointInward(t *testing.T) {
	pkgs := load(t)
	if len(pkgs) < 5 {
		t.Fatalf("found only %d packages; the walk is broken", len(pkgs))
	}
	rules := importRules
	for dir, p := range pkgs {
		for ip, files := range p.imports {
			target, internal := internalPath(ip)
			for _, r := range rules {
				if !under(dir, r.dir) {
					continue
				}
				if r.stdlibOnly && !isStdlib(ip) && !slices.Contains(r.also, ip) {
					t.Errorf("%s (%v) imports %s: this package may import only the standard library", dir, files, ip)
					continue
				}
				if !internal {
					continue
				}
				if a := adapterOf(dir); a != "" && under(target, a) {
					continue // inside the same adapter
				}
				if under(dir, "internal/adapters/inbound") && under(target, sharedInbound) {
					continue // the HTTP plumbing inbound adapters share; not an adapter itself
				}
				ok := false
				for _, allowed := range r.allowed {
					if exact, isExact := strings.CutPrefix(allowed, "="); isExact {
						ok = ok || target == exact
					} else if under(target, allowed) {
						ok = true
					}
				}
				if !ok {
					t.Errorf("%s (%v) imports %s: imports must point inward", dir, files, ip)
				}
			}
			if internal && (under(target, "cmd") || (under(target, "pkg") && !under(dir, "pkg") && !under(dir, "cmd") && !under(dir, "examples"))) {
				t.Errorf("%s imports %s: nothing may import a command, and only commands import pkg", dir, ip)
			}
		}
	}
}

// TestOnlyConfigAndMainReadEnvironment keeps environment access and process
// exit in one place each.
func TestOnlyConfigAndMainReadEnvironment(t *testing.T) {
	banned := map[string]bool{"Getenv": true, "LookupEnv": true, "Environ": true, "Exit": true}
	for dir, p := range load(t) {
		if under(dir, "internal/config") || under(dir, "cmd") || under(dir, "examples") {
			continue
		}
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" && banned[sel.Sel.Name] {
					t.Errorf("%s uses os.%s: only internal/config reads the environment and only main exits", dir, sel.Sel.Name)
				}
				return true
			})
		}
	}
}

// TestDaemonIsBuiltOnTheFacade keeps aquiferd an embedding of pkg/aquifer:
// it builds, starts and stops its runtime through the facade (front doors
// are aquifer.Adapters), never by wiring the core itself.
func TestDaemonIsBuiltOnTheFacade(t *testing.T) {
	p := load(t)["cmd/aquiferd"]
	if p == nil {
		t.Fatal("cmd/aquiferd not found")
	}
	if _, ok := p.imports[module+"/pkg/aquifer"]; !ok {
		t.Error("cmd/aquiferd does not import pkg/aquifer")
	}
	for _, wired := range []string{"internal/app", "internal/l8", "internal/adapters/outbound/egress",
		"internal/adapters/outbound/prometheus", "internal/adapters/outbound/memory"} {
		if files, ok := p.imports[module+"/"+wired]; ok {
			t.Errorf("cmd/aquiferd (%v) imports %s: build the runtime with pkg/aquifer instead", files, wired)
		}
	}
}

// TestEveryCorePackageHasARule keeps the per-package rows of importRules
// complete: a new package under internal/app must
// say what it may import.
func TestEveryCorePackageHasARule(t *testing.T) {
	pkgs := load(t)
	for dir := range pkgs {
		if !under(dir, "internal/app") {
			continue
		}
		ruled := false
		for _, r := range importRules {
			ruled = ruled || r.dir == dir
		}
		if !ruled {
			t.Errorf("%s has no row in importRules: add one naming what it may import", dir)
		}
	}
	for _, r := range importRules {
		if _, ok := pkgs[r.dir]; !ok && under(r.dir, "internal/app") {
			t.Errorf("importRules has a row for %s, which has no Go files: remove it", r.dir)
		}
	}
}
