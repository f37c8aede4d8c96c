// Package azurite starts the Azurite Blob emulator for tests, on a free
// loopback port with its data in a temporary folder, and stops it when the
// test ends. Azurite comes from npm: scripts/azurite.sh installs it into
// .cache/azurite; CDC_SINK_AZURITE names another azurite-blob executable.
// A missing Azurite fails the test (it is not skipped).
package azurite

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// The emulator's well-known development account (public, documented by
// Microsoft; it only ever guards a local emulator).
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Server is a running Azurite Blob service.
type Server struct {
	// Endpoint is the Blob service URL of the development account
	// (http://127.0.0.1:PORT/devstoreaccount1).
	Endpoint string
	Port     int

	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

// Binary returns the azurite-blob executable, failing the test when it is
// not installed.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CDC_SINK_AZURITE"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("CDC_SINK_AZURITE: %v", err)
		}
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	p := filepath.Join(root, ".cache", "azurite", "node_modules", ".bin", "azurite-blob")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("azurite is not installed (%v): run scripts/azurite.sh (needs node and npm), or set CDC_SINK_AZURITE to an azurite-blob executable", err)
	}
	return p
}

// Start starts Azurite and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	var last error
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken before Azurite binds it
		s, err := start(t, bin)
		if err == nil {
			return s
		}
		last = err
	}
	t.Fatalf("azurite did not start: %v", last)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start(t testing.TB, bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(port),
		"--location", dir, "--silent", "--skipApiVersionCheck", "--loose",
		"--disableProductStyleUrl", "--disableTelemetry")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/%s", port, Account), Port: port, cmd: cmd, out: out, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	t.Cleanup(s.stop)
	if err := s.waitReady(30 * time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls the service until it answers any HTTP response.
func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(s.Endpoint + "?comp=list")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("azurite exited: %s", s.out.String())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("azurite did not answer on port %d within %v (%v): %s", s.Port, limit, err, s.out.String())
		}
	}
}

func (s *Server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Stop stops the server now (tests of an unreachable store); the test's
// cleanup would otherwise.
func (s *Server) Stop() { s.stop() }

// ConnectionString is the development account's connection string.
func (s *Server) ConnectionString() string {
	return "DefaultEndpointsProtocol=http;AccountName=" + Account + ";AccountKey=" + Key + ";BlobEndpoint=" + s.Endpoint + ";"
}

// CreateContainer creates a container in the development account.
func (s *Server) CreateContainer(t testing.TB, name string) {
	t.Helper()
	cred, err := container.NewSharedKeyCredential(Account, Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(s.Endpoint+"/"+name, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Create(ctx, nil); err != nil {
		t.Fatalf("create container %s: %v", name, err)
	}
}

// Env sets the environment the Azure backend reads for the development
// account (shared key; endpoint via CDC_SINK_STORAGE_AZURE_ENDPOINT).
func (s *Server) Env(t testing.TB) {
	t.Helper()
	for _, k := range []string{"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN", "CDC_SINK_STORAGE_AZURE_ACCOUNT"} {
		t.Setenv(k, "")
	}
	t.Setenv("AZURE_STORAGE_ACCOUNT", Account)
	t.Setenv("AZURE_STORAGE_KEY", Key)
	t.Setenv("CDC_SINK_STORAGE_AZURE_ENDPOINT", s.Endpoint)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 64<<10 {
		return len(p), nil
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
