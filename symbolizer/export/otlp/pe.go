package otlp

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/rawstack/rawstack/symbolizer/pe"
)

// PDBGUIDAge formats a PDB identity as the value of rawstack.pdb.guid_age:
// the symbol-server key of the PDB.
func PDBGUIDAge(guid [16]byte, age uint32) string {
	return (&pe.CodeView{GUID: pe.GUID(guid), Age: age}).DebugID()
}

// ParsePDBGUIDAge reads a rawstack.pdb.guid_age value: 32 hex digits of
// GUID, then 1 to 8 of age.
func ParsePDBGUIDAge(s string) (guid [16]byte, age uint32, err error) {
	if len(s) < 33 || len(s) > 40 {
		return guid, 0, fmt.Errorf("otlp: %s %q: want 33 to 40 hex digits", AttrPDBGUIDAge, s)
	}
	var raw [16]byte
	if _, err := hex.Decode(raw[:], []byte(s[:32])); err != nil {
		return guid, 0, fmt.Errorf("otlp: %s %q: %w", AttrPDBGUIDAge, s, err)
	}
	a, err := strconv.ParseUint(s[32:], 16, 32)
	if err != nil {
		return guid, 0, fmt.Errorf("otlp: %s %q: %w", AttrPDBGUIDAge, s, err)
	}
	// The key spells the first three fields as numbers; the file stores
	// them little-endian.
	le, be := binary.LittleEndian, binary.BigEndian
	le.PutUint32(guid[0:], be.Uint32(raw[0:]))
	le.PutUint16(guid[4:], be.Uint16(raw[4:]))
	le.PutUint16(guid[6:], be.Uint16(raw[6:]))
	copy(guid[8:], raw[8:])
	return guid, uint32(a), nil
}

// PECodeID formats an image's code id as the value of rawstack.pe.code_id.
func PECodeID(timeDateStamp, sizeOfImage uint32) string {
	return fmt.Sprintf("%08X%x", timeDateStamp, sizeOfImage)
}

// ParsePECodeID reads a rawstack.pe.code_id value.
func ParsePECodeID(s string) (timeDateStamp, sizeOfImage uint32, err error) {
	if len(s) < 9 || len(s) > 16 {
		return 0, 0, fmt.Errorf("otlp: %s %q: want 9 to 16 hex digits", AttrPECodeID, s)
	}
	ts, err1 := strconv.ParseUint(s[:8], 16, 32)
	size, err2 := strconv.ParseUint(s[8:], 16, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("otlp: %s %q: not hex", AttrPECodeID, s)
	}
	return uint32(ts), uint32(size), nil
}
