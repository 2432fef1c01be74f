package otlp_test

import (
	"context"
	"io"
	"log"
	"os"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"github.com/rawstack/rawstack/tracer"
)

// An embedding program streams its own profile to an OpenTelemetry
// Collector: the Exporter is one of the tracer's streams. Raw locations
// leave the naming to the collector (its rawstack processor).
func ExampleExporter() {
	exp, err := otlp.NewExporter(otlp.ExporterOptions{
		Client: otlp.Client{Endpoint: "collector.example:4317", Gzip: true,
			Headers: map[string]string{"authorization": "Bearer " + os.Getenv("TOKEN")}},
		Build: otlp.Options{Raw: true, ServiceName: "checkout"},
	})
	if err != nil {
		log.Fatal(err)
	}
	t, err := tracer.Start(context.Background(), tracer.Options{Frequency: 99, Streams: []io.Writer{exp}})
	if err != nil {
		log.Print(err) // errors.Is(err, platform.ErrNotSupported) off Linux
		exp.Close()
		return
	}
	// ... the program's work ...
	t.Stop()
	exp.Close() // sends the last batch
	log.Printf("%+v", exp.Stats())
}

// A trace file becomes one OTLP request, symbolized here.
func ExampleConvert() {
	r, err := format.Open("trace.rawstack")
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	p, _, err := otlp.Convert(r, otlp.Options{}, func(err error) { log.Print(err) })
	if err != nil {
		log.Fatal(err)
	}
	if err := otlp.Write(os.Stdout, p); err != nil {
		log.Fatal(err)
	}
}
