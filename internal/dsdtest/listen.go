package dsdtest

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// Datagram is one datagram received, with when it arrived.
type Datagram struct {
	Data []byte
	At   time.Time
}

// Server receives datagrams on a real socket until the test ends.
type Server struct {
	// Addr is the address to give a client: "127.0.0.1:port" or
	// "unixgram:///path".
	Addr string
	C    <-chan Datagram
	conn net.PacketConn
}

// ListenUDP listens on a loopback UDP port.
func ListenUDP(t testing.TB) *Server {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, c, c.LocalAddr().String())
}

// ListenUnixgram listens on a unix datagram socket in a temporary
// directory, as the agent's dsd.socket.
func ListenUnixgram(t testing.TB) *Server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dsd.socket")
	c, err := net.ListenPacket("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, c, "unixgram://"+path)
}

func serve(t testing.TB, c net.PacketConn, addr string) *Server {
	ch := make(chan Datagram, 1024)
	s := &Server{Addr: addr, C: ch, conn: c}
	go func() {
		defer close(ch)
		buf := make([]byte, 65536)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			ch <- Datagram{Data: append([]byte(nil), buf[:n]...), At: time.Now()}
		}
	}()
	t.Cleanup(func() { c.Close() })
	return s
}

// Close stops listening: a client's next datagrams are refused.
func (s *Server) Close() { s.conn.Close() }

// Collect returns the messages of every datagram that arrives until
// done(messages so far) is true, failing the test at timeout.
func (s *Server) Collect(t testing.TB, timeout time.Duration, done func([]Message) bool) []Message {
	t.Helper()
	var all []Message
	deadline := time.After(timeout)
	for !done(all) {
		select {
		case d, ok := <-s.C:
			if !ok {
				t.Fatal("dogstatsd server closed")
			}
			msgs, err := Parse(d.Data)
			if err != nil {
				t.Fatalf("not DogStatsD: %v", err)
			}
			all = append(all, msgs...)
		case <-deadline:
			t.Fatalf("timed out after %v; got %d messages", timeout, len(all))
		}
	}
	return all
}
