package dumpjson

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Report is the whole of one `goroce dump --json` output.
type Report struct {
	Packets []Packet
	Summary Summary
}

// Read reads `goroce dump --json` output: Packet lines, then the Summary.
// An output without a summary (a dump that died) is an error.
func Read(r io.Reader) (*Report, error) {
	rep := &Report{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var haveSummary bool
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if bytes.Contains(line, []byte(`"summary":true`)) {
			if err := json.Unmarshal(line, &rep.Summary); err != nil {
				return nil, fmt.Errorf("dump summary: %w", err)
			}
			haveSummary = true
			continue
		}
		var p Packet
		if err := json.Unmarshal(line, &p); err != nil {
			return nil, fmt.Errorf("dump line %q: %w", line, err)
		}
		rep.Packets = append(rep.Packets, p)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !haveSummary {
		return nil, errors.New("dump printed no summary")
	}
	return rep, nil
}
