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
	w := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(w)
	for _, ev := range storetest.AgentThread(*n) {
		if err := enc.Encode(ev.Message); err != nil {
			fmt.Fprintln(os.Stderr, "agentthread:", err)
			os.Exit(1)
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "agentthread:", err)
		os.Exit(1)
	}
}
