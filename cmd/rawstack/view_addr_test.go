package main

import (
	"net"
	"testing"
)

// TestValidHostPort holds validHostPort to net.SplitHostPort, which
// rawstack does not link.
func TestValidHostPort(t *testing.T) {
	for _, s := range []string{"localhost:", "localhost:8080", ":0", "127.0.0.1:1", "[::1]:80", "[::1]:", "::1:80",
		"localhost", "", "[::1]", "a]:1", "[a:1", "[[::1]]:2", "h:p:q", "[::1]x:1", "host:[1]"} {
		_, _, err := net.SplitHostPort(s)
		if got, want := validHostPort(s), err == nil; got != want {
			t.Errorf("validHostPort(%q) = %v, net.SplitHostPort says %v (%v)", s, got, want, err)
		}
	}
}
