// Package window builds the window a model sees for its next call from a
// thread's log and its policy: pinned head, memory block, live tail; tool
// results evicted or masked; a safe cut when over the trigger; tool pairs
// repaired; the budget always respected (docs/design.md, "How a window is
// built").
//
// Everything here is deterministic and pure: a State is a function of the
// events applied to it and of its Policy (invariant I7). The package knows
// nothing of HTTP, SQL or LLMs: the caller (the mneme package) loads events,
// asks for a Plan when the window passes its trigger, turns the Plan into
// log events (running a summarizer for the observe strategy) and applies
// them back. It imports message and store (for the Event type) only.
//
// Between two compactions the window only grows at its end (I6): the State
// keeps its rendered messages and appends to them, so a call costs work in
// proportion to the new messages, not to the thread.
package window
