//go:build !linux && !darwin

package mock

import "net"

// watchClose does not watch on this platform: a client that goes away is
// noticed only when a streamed chunk fails to write.
func watchClose(net.Conn, func()) (stop func()) { return func() {} }
