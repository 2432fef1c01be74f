package otlp

import "testing"

// FuzzPartialSuccess feeds arbitrary answers to the reader of
// ExportProfilesServiceResponse.partial_success: an endpoint's answer is
// untrusted input.
func FuzzPartialSuccess(f *testing.F) {
	// partial_success {rejected_profiles: 3, error_message: "bad"}
	f.Add([]byte{0x0a, 0x07, 0x08, 0x03, 0x12, 0x03, 'b', 'a', 'd'})
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		rej, msg := partialSuccess(b)
		if len(msg) > len(b) {
			t.Fatalf("message of %d bytes from an answer of %d", len(msg), len(b))
		}
		_ = rej
	})
}

func TestPartialSuccess(t *testing.T) {
	rej, msg := partialSuccess([]byte{0x0a, 0x07, 0x08, 0x03, 0x12, 0x03, 'b', 'a', 'd'})
	if rej != 3 || msg != "bad" {
		t.Errorf("got %d %q", rej, msg)
	}
	if rej, _ := partialSuccess(nil); rej != 0 {
		t.Errorf("empty answer: %d rejected", rej)
	}
}
