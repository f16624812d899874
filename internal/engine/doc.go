// Package engine is the lock library below its API: Client and Lock as the
// layers under them see them, and the I/O shell that drives those layers
// (internal/core's decisions, internal/wait's waiting machinery,
// internal/master's connections, internal/script's scripts). The public
// package redlock wraps it, and documents the contracts; the doc comments
// here state the same contracts for the code that keeps them.
package engine
