package fetch

import (
	"context"
	"errors"
	"testing"
)

type getterFunc func(ctx context.Context, req *Request, path string) error

func (f getterFunc) Get(ctx context.Context, req *Request, path string) error {
	return f(ctx, req, path)
}

// TestRegistry: without a registered getter Get names the import that
// provides one; a registered getter is used when none is given, and a
// given one wins.
func TestRegistry(t *testing.T) {
	if err := Get(context.Background(), nil, &Request{URL: "http://x/"}, "/nonexistent"); !errors.Is(err, ErrNoGetter) {
		t.Fatalf("no getter: err %v, want ErrNoGetter", err)
	}
	var used string
	Register(getterFunc(func(context.Context, *Request, string) error { used = "registered"; return nil }))
	defer Register(nil)
	if err := Get(context.Background(), nil, &Request{}, ""); err != nil || used != "registered" {
		t.Errorf("registered getter: used %q, err %v", used, err)
	}
	mine := getterFunc(func(context.Context, *Request, string) error { used = "given"; return nil })
	if err := Get(context.Background(), mine, &Request{}, ""); err != nil || used != "given" {
		t.Errorf("given getter: used %q, err %v", used, err)
	}
}
