package dump

import (
	"bufio"
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/dumpjson"
)

// TestJSONSchema: every line `goroce dump --json` writes for the rxe
// captures, and a corrupted one's, decodes into package dumpjson's records
// with no field left over and encodes back to the same bytes: what the
// interop harness reads is all of what dump writes.
func TestJSONSchema(t *testing.T) {
	files, err := filepath.Glob(rxeDir + "*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	// Malformed and truncated packets carry the error fields.
	cut := filepath.Join(t.TempDir(), "truncated.pcap")
	writePcap(t, cut, truncate(readRecords(t, rxeDir+"read_bw_small.pcap"), 60), 60)
	files = append(files, cut)
	for _, f := range files {
		var out bytes.Buffer
		if _, err := DumpFile(f, &out, Options{JSON: true}); err != nil {
			t.Fatal(err)
		}
		rep, err := dumpjson.Read(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sc := bufio.NewScanner(&out)
		sc.Buffer(nil, 1<<24)
		n := 0
		for sc.Scan() {
			line := sc.Bytes()
			var v any = new(dumpjson.Packet)
			if bytes.Contains(line, []byte(`"summary":true`)) {
				v = new(dumpjson.Summary)
			} else {
				n++
			}
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				t.Fatalf("%s: %v: %s", f, err, line)
			}
			back, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, line) {
				t.Fatalf("%s: round trip\n got %s\nwant %s", f, back, line)
			}
		}
		if n != len(rep.Packets) || rep.Summary.RoCE != n {
			t.Errorf("%s: %d packet lines, Read found %d, summary says %d", f, n, len(rep.Packets), rep.Summary.RoCE)
		}
	}
}
