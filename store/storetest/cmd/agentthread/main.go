// Command agentthread prints storetest.AgentThread's messages, one JSON
// message (package message's encoding) a line: the workload of issue 19's
// durable-append benchmark, for a peer's benchmark in another language to
// append the same bytes (tests/peers, run by scripts/bench-speed's peers
// part).
//
//	go run ./store/storetest/cmd/agentthread -n 1000 > agent.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mnemehq/mneme/store/storetest"
)

func main() {
	n := flag.Int("n", 1000, "how many messages")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "agentthread: -n must be at least 1")
		os.Exit(2)
	}
	if err := write(os.Stdout, *n); err != nil {
		fmt.Fprintln(os.Stderr, "agentthread:", err)
		os.Exit(1)
	}
}

// write writes the first n messages of the transcript to w, a line each.
func write(w io.Writer, n int) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, ev := range storetest.AgentThread(n) {
		if err := enc.Encode(ev.Message); err != nil {
			return err
		}
	}
	return bw.Flush()
}
