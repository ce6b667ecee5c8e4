package linger

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// A server that answers while the client is still sending and then closes
// lingeringly lets the client finish its upload and read the answer;
// without lingering, the close with unread data resets the connection and
// the client's upload fails (Node's HTTP clients then report ECONNRESET
// without looking at the answer).
func TestAnswerReachesSendingClient(t *testing.T) {
	for _, linger := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lln := Listen(ln, Config{Timeout: 5 * time.Second})
		go func() {
			c, err := lln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1024)
			_, _ = io.ReadFull(c, buf) // part of the upload only
			_, _ = io.WriteString(c, "answer\n")
			if linger {
				Set(c)
			}
			_ = c.Close()
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// Upload 32 MiB before reading the answer, as many clients do.
		chunk := []byte(strings.Repeat("x", 64<<10))
		var werr error
		for range 512 {
			if _, werr = c.Write(chunk); werr != nil {
				break
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		ln.Close()
		if linger && (werr != nil || err != nil || line != "answer\n") {
			t.Errorf("lingering close: upload %v, read %q, %v", werr, line, err)
		}
		if !linger && werr == nil {
			t.Errorf("plain close: the upload succeeded: the test no longer shows the reset it guards against")
		}
	}
}
