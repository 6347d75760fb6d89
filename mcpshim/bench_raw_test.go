package mcpshim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"testing"
)

// BenchmarkToolsListStdio times tools/list as a harness sees it on an open
// stdio session: one request line written, the response line read, with no
// client-side decoding (which the go-sdk client adds in BenchmarkToolsList).
func BenchmarkToolsListStdio(b *testing.B) {
	s := New(Options{SocketPath: "/nonexistent/mailctl-bench.sock"})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, &LineTransport{In: inR, Out: outW})
	br := bufio.NewReaderSize(outR, 1<<20)
	io.WriteString(inW, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`+"\n")
	if _, err := br.ReadSlice('\n'); err != nil {
		b.Fatal(err)
	}
	io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	n := 0
	size := 0
	for b.Loop() {
		n++
		fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`+"\n", n)
		line, err := br.ReadBytes('\n')
		if err != nil {
			b.Fatal(err)
		}
		size = len(line)
	}
	b.ReportMetric(float64(size), "bytes/op")
	inW.Close()
}
