package relock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// A lifecycle's state changes in one place (docs/development.md, "Lifecycles"): no code outside a
// machine's transition function assigns a hold's phase, renewal phase, releases, mode, count or expiry, or
// a gate waiter's phase. A new behaviour adds a row to a machine's table, not an assignment elsewhere.
func TestLifecycleStateChangesInOnePlace(t *testing.T) {
	// The places allowed to change state: a file, and the functions of it (nil: any).
	allowed := map[string][]string{
		"holdstate.go": nil,                     // the hold machine: transitionLocked and its helpers
		"holdend.go":   {"endLocked"},           // the end of a hold, called by transitionLocked only
		"gatestate.go": {"stepLocked"},          // the gate waiter machine
		"gate.go":      {"forgetIfEmptyLocked"}, // a pooled gate keeps its first waiter's final phase
	}
	state := map[string]bool{"phase": true, "renewing": true, "releases": true, "mode": true, "count": true,
		"expiresAt": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ok = false
			if fns, in := allowed[name]; in {
				ok = fns == nil
				for _, a := range fns {
					ok = ok || a == fn.Name.Name
				}
			}
			if ok {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				var lhs []ast.Expr
				switch s := n.(type) {
				case *ast.AssignStmt:
					if s.Tok != token.DEFINE {
						lhs = s.Lhs
					}
				case *ast.IncDecStmt:
					lhs = []ast.Expr{s.X}
				}
				for _, e := range lhs {
					if sel, ok := e.(*ast.SelectorExpr); ok && state[sel.Sel.Name] {
						t.Errorf("%s: %s changes .%s outside a lifecycle's transition function",
							fset.Position(sel.Pos()), fn.Name.Name, sel.Sel.Name)
					}
				}
				return true
			})
		}
	}
}
