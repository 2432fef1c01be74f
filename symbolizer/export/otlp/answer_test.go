package otlp

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzAnswer reads an endpoint's answer as the Client does — the gRPC
// frame (plain or gzipped), the ExportProfilesServiceResponse in it, and
// a google.rpc.Status's details — and checks it against pdata's and
// protobuf-go's decoders: never a panic, and where they decode the
// bytes, the same partial success and the same RetryInfo. Seeded with
// answers those libraries encode.
func FuzzAnswer(f *testing.F) {
	r := pprofileotlp.NewExportResponse()
	r.PartialSuccess().SetRejectedProfiles(3)
	r.PartialSuccess().SetErrorMessage("too old")
	msg, err := r.MarshalProto()
	if err != nil {
		f.Fatal(err)
	}
	frame := func(flag byte, b []byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{flag}, uint32(len(b))), b...)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(msg)
	zw.Close()
	retry, _ := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(1)})
	other, _ := anypb.New(&errdetails.ErrorInfo{Reason: "x"})
	st, _ := proto.Marshal(&spb.Status{Code: 8, Message: "busy", Details: []*anypb.Any{other, retry}})
	f.Add(frame(0, msg), st)
	f.Add(frame(1, z.Bytes()), []byte{})
	f.Add(frame(0, nil), st[:len(st)/2])
	f.Fuzz(func(t *testing.T, body, status []byte) {
		for _, enc := range []string{"", "gzip"} {
			m, err := unframe(body, enc)
			if err != nil {
				continue
			}
			rejected, text, err := parseResponse(m)
			ref := pprofileotlp.NewExportResponse()
			if refErr := ref.UnmarshalProto(m); refErr == nil && err == nil {
				ps := ref.PartialSuccess()
				if want := ps.ErrorMessage()[:min(len(ps.ErrorMessage()), maxPartialMessage)]; ps.RejectedProfiles() != rejected || text != want {
					t.Fatalf("partial success %d %q, pdata's %d %q", rejected, text, ps.RejectedProfiles(), ps.ErrorMessage())
				}
			}
		}
		got := hasRetryInfo(status)
		var ref spb.Status
		if proto.Unmarshal(status, &ref) == nil {
			want := false
			for _, d := range ref.Details {
				if d.MessageIs(&errdetails.RetryInfo{}) {
					want = true
				}
			}
			if got != want {
				t.Fatalf("RetryInfo %v, protobuf-go's %v", got, want)
			}
		}
	})
}
