package otlp

import "testing"

func TestPDBGUIDAgeRoundTrip(t *testing.T) {
	guid := [16]byte{0x22, 0xf3, 0xff, 0x9c, 0x93, 0x38, 0xd7, 0xe0, 0x4c, 0x4c, 0x44, 0x20, 0x50, 0x44, 0x42, 0x2e}
	s := PDBGUIDAge(guid, 0x1a)
	if s != "9CFFF3223893E0D74C4C44205044422E1A" {
		t.Errorf("PDBGUIDAge = %s", s)
	}
	g, a, err := ParsePDBGUIDAge(s)
	if err != nil || g != guid || a != 0x1a {
		t.Errorf("ParsePDBGUIDAge(%s) = %x %d %v", s, g, a, err)
	}
	for _, bad := range []string{"", "9CFFF322", "9CFFF3223893E0D74C4C44205044422E", "ZZFFF3223893E0D74C4C44205044422E1", "9CFFF3223893E0D74C4C44205044422E1FFFFFFFFF"} {
		if _, _, err := ParsePDBGUIDAge(bad); err == nil {
			t.Errorf("ParsePDBGUIDAge(%q) accepted", bad)
		}
	}
	ts, size, err := ParsePECodeID(PECodeID(0x6543210F, 0x1d000))
	if err != nil || ts != 0x6543210F || size != 0x1d000 {
		t.Errorf("code id round trip: %x %x %v", ts, size, err)
	}
	if _, _, err := ParsePECodeID("6543210Fzz"); err == nil {
		t.Error("bad code id accepted")
	}
}

func FuzzParsePDBGUIDAge(f *testing.F) {
	f.Add("9CFFF3223893E0D74C4C44205044422E1A")
	f.Add("6543210F1d000")
	f.Fuzz(func(t *testing.T, s string) {
		g, a, err := ParsePDBGUIDAge(s)
		if err == nil {
			if back := PDBGUIDAge(g, a); len(back) > len(s) {
				t.Fatalf("%q -> %q", s, back)
			}
		}
		ParsePECodeID(s)
	})
}
