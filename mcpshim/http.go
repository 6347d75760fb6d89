package mcpshim

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// CheckLoopback refuses listen addresses that are not on a loopback interface:
// the HTTP transport acts with the user's uid and must not be reachable from
// other hosts.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: want HOST:PORT on a loopback address such as 127.0.0.1:8765: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--http %q: only loopback addresses (127.0.0.1, [::1], localhost) are allowed; the server acts as you", addr)
	}
	return nil
}

// ReadTokenFile reads the bearer token from path, refusing a file that other
// users could read or that belongs to someone else.
func ReadTokenFile(path string) (string, error) {
	f, err := openRegular(path)
	if errors.Is(err, errNotRegular) {
		return "", fmt.Errorf("token file %s is not a regular file", path)
	}
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %04o: make it readable by you only (chmod 600 %s)", path, perm, path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return "", fmt.Errorf("token file %s belongs to uid %d, not to you (uid %d)", path, sys.Uid, os.Getuid())
	}
	buf := make([]byte, 4096)
	n, err := f.Read(buf)
	if err != nil && n == 0 {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(buf[:n]))
	if len(tok) < 16 {
		return "", fmt.Errorf("token file %s: the token must be at least 16 characters (e.g. openssl rand -hex 32)", path)
	}
	return tok, nil
}

// HTTPHandler serves the Streamable HTTP transport behind a bearer token check.
func (s *Server) HTTPHandler(token string) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{Logger: s.log,
		MaxRequestBodyBytes: MaxRequestBytes}) // the SDK's 4 MiB default would refuse a 3 MiB attachment
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mailctl"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// RunHTTP serves Streamable HTTP on a loopback addr until ctx ends.
func (s *Server) RunHTTP(ctx context.Context, addr, token string) error {
	if err := CheckLoopback(addr); err != nil {
		return err
	}
	if token == "" {
		return errors.New("a bearer token is required (--token-file)")
	}
	defer s.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.HTTPHandler(token), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	s.log.Info("serving MCP over HTTP", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
