package qpexpvar_test

import (
	"encoding/json"
	"expvar"
	"fmt"
	"log"
	"testing"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/qp/qpexpvar"
)

// runs numbers TestPublish's runs in this process: expvar names are
// process-global and cannot be removed, so each run takes its own.
var runs int

// TestPublish: the published variable is the device's Stats.Map as JSON,
// read afresh each time, and a taken name is an error, not a panic.
func TestPublish(t *testing.T) {
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	runs++
	name := fmt.Sprintf("goroce_test_%d", runs)
	if err := qpexpvar.Publish(a, name); err != nil {
		t.Fatal(err)
	}
	if err := qpexpvar.Publish(b, name); err == nil {
		t.Fatal("Publish under a taken name succeeded")
	}
	var v struct {
		Name string            `json:"name"`
		HW   map[string]uint64 `json:"hw_counters"`
	}
	if err := json.Unmarshal([]byte(expvar.Get(name).String()), &v); err != nil {
		t.Fatal(err)
	}
	if v.Name != a.Name() || len(v.HW) == 0 {
		t.Fatalf("published %+v, want device %q with its hw_counters", v, a.Name())
	}
	if _, ok := v.HW["rcvd_pkts"]; !ok {
		t.Fatalf("hw_counters lack rxe's rcvd_pkts: %v", v.HW)
	}
}

// A device's counters as an expvar. qpexpvar.Publish(dev, "goroce")
// publishes them under /debug/vars of net/http's DefaultServeMux (e.g.
// http.ListenAndServe("localhost:6060", nil)).
func ExampleVar() {
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	var v map[string]any
	if err := json.Unmarshal([]byte(qpexpvar.Var(a).String()), &v); err != nil {
		log.Fatal(err)
	}
	fmt.Println(v["name"] == a.Name(), v["hw_counters"] != nil, v["port_counters"] != nil)
	// Output: true true true
}
