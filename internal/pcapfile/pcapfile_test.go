package pcapfile

import (
	"bytes"
	"os"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b, LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 123456789).UTC()
	for i := 0; i < 3; i++ {
		if err := w.WritePacket(ts.Add(time.Duration(i)), bytes.Repeat([]byte{byte(i)}, 60+i)); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := ReadAll(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("got %d records", len(recs))
	}
	for i, r := range recs {
		if !r.Time.Equal(ts.Add(time.Duration(i))) || len(r.Data) != 60+i || r.Data[0] != byte(i) {
			t.Fatalf("record %d: %v len %d", i, r.Time, len(r.Data))
		}
	}
}

func TestRealCapture(t *testing.T) {
	f, err := os.Open("../../testdata/rxe/rc_pingpong_small.pcap")
	if err != nil {
		t.Skip("capture not present:", err)
	}
	defer f.Close()
	recs, err := ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 202 {
		t.Fatalf("only %d records", len(recs))
	}
}

func TestNotPcap(t *testing.T) {
	if _, err := NewReader(bytes.NewReader(make([]byte, 24))); err != ErrNotPcap {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewReader(bytes.NewReader(nil)); err == nil {
		t.Fatal("empty input accepted")
	}
}
