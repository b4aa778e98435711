package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PostgresBin is where Debian's PostgreSQL 15 keeps its programs (with
// llvmjit.so, its LLVM JIT, beside them in ../lib).
const PostgresBin = "/usr/lib/postgresql/15/bin"

// Postgres is a private PostgreSQL cluster a test started: run by user
// nobody in a directory of its own, reachable only on a unix socket in
// that directory, stopped and removed when the test ends.
type Postgres struct {
	Dir   string // the cluster's directory; its socket is in it
	uid   uint32
	gid   uint32
	psql  string
	pgctl string
}

// StartPostgres initializes and starts a cluster with the given settings
// (name=value, as postgres -c takes them) on top of no TCP listener.
func StartPostgres(t testing.TB, settings ...string) *Postgres {
	t.Helper()
	EndToEnd(t)
	RequireRoot(t)
	initdb := RequireTool(t, filepath.Join(PostgresBin, "initdb"))
	uid, gid := Nobody(t)
	dir := SharedTempDir(t)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	pg := &Postgres{Dir: dir, uid: uint32(uid), gid: uint32(gid),
		psql: filepath.Join(PostgresBin, "psql"), pgctl: filepath.Join(PostgresBin, "pg_ctl")}
	data := filepath.Join(dir, "data")
	if out, err := pg.command(initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	opts := []string{"-k " + dir, "-c listen_addresses=''", "-c fsync=off"}
	for _, s := range settings {
		opts = append(opts, "-c "+s)
	}
	start := pg.command(pg.pgctl, "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "-o", strings.Join(opts, " "), "start")
	if out, err := start.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	t.Cleanup(func() {
		if out, err := pg.command(pg.pgctl, "-D", data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
			t.Errorf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	return pg
}

// command runs name as the cluster's user.
func (pg *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = pg.Dir
	// LD_BIND_NOW: every PLT entry bound when its library loads. The
	// call-site oracle (capture's TestCallersProvable) reads a PLT
	// entry's GOT slot after the recording, the unwinder as each sample
	// arrives: an entry bound lazily in between leads to the dynamic
	// linker's resolver at the sample, which the unwinder cannot see
	// through and so does not refute, and to its function when the
	// oracle looks (libLLVM's operator delete@plt, once in 83,000 frames).
	cmd.Env = append(os.Environ(), "HOME="+pg.Dir, "LD_BIND_NOW=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: pg.uid, Gid: pg.gid}}
	return cmd
}

// Psql runs SQL to its end and returns what it printed (unaligned, tuples
// only).
func (pg *Postgres) Psql(t testing.TB, sql string) string {
	t.Helper()
	out, err := pg.psqlCmd("-c", sql).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v\n%s", sql, err, out)
	}
	return string(out)
}

func (pg *Postgres) psqlCmd(args ...string) *exec.Cmd {
	return pg.command(pg.psql, append([]string{"-h", pg.Dir, "-U", "postgres", "-qAt", "-v", "ON_ERROR_STOP=1"}, args...)...)
}

// Backend runs the SQL script in a session of its own and returns the
// pid of the session's backend process — where the queries run (and are
// JIT compiled) — once the script has started. The session ends with the
// test.
func (pg *Postgres) Backend(t testing.TB, script string) int {
	t.Helper()
	file := filepath.Join(pg.Dir, fmt.Sprintf("script-%d.sql", time.Now().UnixNano()))
	if err := os.WriteFile(file, []byte("SELECT 'backend ' || pg_backend_pid();\n"+script), 0o644); err != nil {
		t.Fatal(err)
	}
	session := StartCmd(t, pg.psqlCmd("-f", file))
	line := session.WaitLine(t, "backend ", 30*time.Second)
	var pid int
	if _, err := fmt.Sscanf(line, "backend %d", &pid); err != nil {
		t.Fatalf("psql said %q", line)
	}
	return pid
}
