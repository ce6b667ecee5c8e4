// Package linger provides a listener whose connections can be closed
// lingeringly: the write side is shut (the peer reads the answer already
// written, then EOF) and what the peer still sends is read and discarded, up
// to a byte bound and a deadline, before the socket is closed.
//
// A server that answers an error (413: the body is too large, 431: the
// headers are) while the client is still sending, then closes a socket with
// unread data, makes the kernel send a TCP reset; the client sees
// ECONNRESET, often before it has read the answer, and retries. Apache and
// nginx ("lingering close") avoid it the same way.
package linger
