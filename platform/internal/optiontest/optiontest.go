// Package optiontest checks that a back end either honours or refuses,
// with a *platform.OptionError naming it, every field of platform.Config:
// a field added to Config fails every back end's test until the back end
// says which it does, so no option is dropped silently.
package optiontest

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/rawstack/rawstack/platform"
)

// Check sets each field of base in turn to a non-zero value (true, 1, the
// next enum value, a path) and calls check: a field in honoured must pass, any
// other must return a *platform.OptionError whose Option is the field's
// name and which errors.Is platform.ErrNotSupported.
func Check(t *testing.T, check func(platform.Config) error, base platform.Config, honoured ...string) {
	t.Helper()
	if err := check(base); err != nil {
		t.Fatalf("base config %+v: %v", base, err)
	}
	rt := reflect.TypeOf(base)
	for i := 0; i < rt.NumField(); i++ {
		name := rt.Field(i).Name
		cfg := base
		v := reflect.ValueOf(&cfg).Elem().Field(i)
		switch v.Kind() {
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Uint8, reflect.Uint32, reflect.Uint64:
			v.SetUint(v.Uint() + 1)
		case reflect.String:
			v.SetString(v.String() + "/set")
		default:
			t.Fatalf("Config.%s: kind %v not handled by optiontest", name, v.Kind())
		}
		err := check(cfg)
		if slices.Contains(honoured, name) {
			if err != nil {
				t.Errorf("Config.%s=%v is honoured, but check says %v", name, v, err)
			}
			continue
		}
		var oe *platform.OptionError
		switch {
		case err == nil:
			t.Errorf("Config.%s=%v: accepted, but the back end does not list it as honoured: implement it or refuse it", name, v)
		case !errors.As(err, &oe) || oe.Option != name:
			t.Errorf("Config.%s=%v: %v, want a *platform.OptionError naming %s", name, v, err, name)
		case !errors.Is(err, platform.ErrNotSupported):
			t.Errorf("Config.%s: %v does not wrap ErrNotSupported", name, err)
		default:
			t.Logf("Config.%s=%v: %v", name, v, err)
		}
	}
}
