// Command racer is the unprivileged user who can write the directory root
// writes into: it renames every directory and file it finds there away and
// puts a symbolic link to -victim in its place, in a tight loop, and plants
// links under the names in -plant. Tests run it as user nobody beside code
// that writes as root, and check that nothing reached the victim.
//
// It prints "ready" once it has made its first pass, what it did so far
// on standard output at SIGUSR1, and on standard error when it ends at
// SIGTERM.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
)

func main() {
	dir := flag.String("dir", "", "the directory to attack")
	victim := flag.String("victim", "", "where the planted links point")
	plant := flag.String("plant", "", "comma-separated names to plant links under before anything else")
	flag.Parse()
	if *dir == "" || *victim == "" {
		fmt.Fprintln(os.Stderr, "usage: racer -dir DIR -victim PATH [-plant NAME,...]")
		os.Exit(2)
	}
	if *plant != "" {
		for _, name := range strings.Split(*plant, ",") {
			os.Symlink(*victim, filepath.Join(*dir, name))
		}
	}
	var swapped, refused atomic.Int64
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGUSR1)
	go func() {
		for s := range sig {
			if s == syscall.SIGUSR1 {
				fmt.Printf("racer: %d swapped, %d refused\n", swapped.Load(), refused.Load())
				continue
			}
			fmt.Fprintf(os.Stderr, "racer: %d swapped, %d refused\n", swapped.Load(), refused.Load())
			os.Exit(0)
		}
	}()
	d, err := os.Open(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "racer:", err)
		os.Exit(1)
	}
	for pass := 0; ; pass++ {
		if _, err := d.Seek(0, 0); err != nil {
			os.Exit(1)
		}
		names, _ := d.Readdirnames(-1)
		for _, name := range names {
			if strings.HasPrefix(name, ".moved-") {
				continue
			}
			p := filepath.Join(*dir, name)
			if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink != 0 {
				continue
			}
			// Rename the entry away (in the same directory: moving a
			// directory we cannot write to another parent is not
			// allowed), then link its name to the victim.
			if err := os.Rename(p, filepath.Join(*dir, fmt.Sprintf(".moved-%s.%d", name, pass))); err != nil {
				refused.Add(1)
				continue
			}
			if os.Symlink(*victim, p) == nil {
				swapped.Add(1)
			}
		}
		if pass == 0 {
			fmt.Println("ready")
		}
	}
}
