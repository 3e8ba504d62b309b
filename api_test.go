package relock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The package's argument rule (see the package doc, "Arguments"), checked on every exported function and
// method of every module of the repository (the library, relocktest, cmd/relock, examples, bench, the
// fault suites): the context comes first; the durations come last, after what the call works with; a wait
// comes before a lease; and every Try method reports whether it got what it tried for as a bool just
// before its error, false with a nil error when the wait ran out.
func TestAPIArgumentRule(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	checked := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := d.Name(); path != "." && (base == "internal" || base == "testdata" || strings.HasPrefix(base, ".")) {
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
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || !fn.Name.IsExported() { // a method of an unexported type may be promoted (composite's)
				continue
			}
			checked[funcName(fn)] = true
			for _, problem := range argumentRule(fn) {
				t.Errorf("%s: %s: %s", fset.Position(fn.Pos()), funcName(fn), problem)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"*RLock.TryLock", "*composite.TryLock", "*Semaphore.TryAcquire", "*PermitSemaphore.TryAcquire",
		"*CountDownLatch.TryAwait", "*Election.Campaign", "*Server.FailRenewals", "WithReplicaAck"} {
		if !checked[fn] {
			t.Errorf("%s was not checked: the walk missed it", fn)
		}
	}
	t.Logf("%d exported functions and methods follow the rule", len(checked))
}

// argumentRule returns how fn breaks the rule, if it does.
func argumentRule(fn *ast.FuncDecl) []string {
	var problems []string
	var params []string // each parameter's type, one entry per name
	var names []string
	for _, field := range fn.Type.Params.List {
		typ := exprString(field.Type)
		if len(field.Names) == 0 {
			params, names = append(params, typ), append(names, "")
		}
		for _, n := range field.Names {
			params, names = append(params, typ), append(names, n.Name)
		}
	}
	seenDuration, wait, lease := false, -1, -1
	for i, typ := range params {
		switch {
		case typ == "context.Context" && i != 0:
			problems = append(problems, "the context is not the first parameter")
		case typ == "time.Duration":
			seenDuration = true
			switch names[i] {
			case "wait":
				wait = i
			case "lease":
				lease = i
			}
		case seenDuration && !strings.HasPrefix(typ, "..."):
			problems = append(problems, "parameter "+names[i]+" comes after a duration")
		}
	}
	if wait >= 0 && lease >= 0 && lease < wait {
		problems = append(problems, "the lease comes before the wait")
	}
	if strings.HasPrefix(fn.Name.Name, "Try") {
		var results []string
		if fn.Type.Results != nil {
			for _, field := range fn.Type.Results.List {
				for range max(len(field.Names), 1) {
					results = append(results, exprString(field.Type))
				}
			}
		}
		if n := len(results); n < 2 || results[n-1] != "error" || results[n-2] != "bool" {
			problems = append(problems, "a Try method must return (..., ok bool, err error), got ("+strings.Join(results, ", ")+")")
		}
	}
	return problems
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil {
		return fn.Name.Name
	}
	return exprString(fn.Recv.List[0].Type) + "." + fn.Name.Name
}

// exprString renders the type expressions the rule looks at.
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.ArrayType:
		return "[]" + exprString(e.Elt)
	case *ast.Ellipsis:
		return "..." + exprString(e.Elt)
	case *ast.MapType:
		return "map[" + exprString(e.Key) + "]" + exprString(e.Value)
	case *ast.ChanType:
		return "chan " + exprString(e.Value)
	case *ast.FuncType:
		return "func"
	case *ast.InterfaceType:
		return "interface"
	case *ast.IndexExpr:
		return exprString(e.X) + "[" + exprString(e.Index) + "]"
	}
	return "?"
}
