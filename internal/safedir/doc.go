// Package safedir writes and removes files relative to directory
// descriptors stallwatch opened itself, never through a path that another
// user could swap between two system calls.
//
// stallwatch runs as root. A path such as /tmp/captures/.tmp-123/report.txt
// is resolved again by every system call that takes it; a user who can
// write any directory on it can rename a directory away and plant a
// symbolic link in the gap, and root then writes, chmods or removes
// whatever the link points at. This package opens a directory once, checks
// who may write it, and does everything else relative to that descriptor:
//
//   - openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) with O_NOFOLLOW for every
//     name (openat with O_NOFOLLOW on kernels before 5.6); a name is one
//     path component, never "..";
//   - mkdirat, then open the new directory and check it is the one we
//     made (owned by us) before fchmod;
//   - files are written to a new temporary name (O_CREAT|O_EXCL), chmodded
//     with fchmod, fsynced and renamed into place with renameat;
//     directories are published with renameat2(RENAME_NOREPLACE);
//   - removal walks with openat(O_NOFOLLOW) and unlinkat: a link planted
//     in a tree being removed is unlinked, never followed;
//   - what only a path can name (a unix socket after bind) is chmodded
//     through an O_PATH|O_NOFOLLOW descriptor, and only when it is ours.
//
// # Which directories are trusted
//
// Open and MkdirAll refuse a directory that another user can write: one
// not owned by us or root, or writable by group or others without the
// sticky bit. A sticky directory owned by us or root (/tmp) is trusted:
// others may add entries to it but cannot rename or remove ours. The error
// is an *UnsafeError (errors.Is ErrUnsafe) that says how to fix it. Only
// the directory itself is checked: the directories above it are the
// operator's (docs/security.md says what not to do). Wrap
// takes a directory descriptor opened elsewhere without the check, for a
// directory that is shared by design (a target's /tmp for its perf map).
//
// # API
//
//	d, err := safedir.MkdirAll("/var/lib/stallwatch/spool", 0o755)   // or Open
//	defer d.Close()
//	err = d.WriteFile("state.json", 0o644, func(w io.Writer) error { ... })
//	f, err := d.CreateTemp(".upload-*")            // write, then
//	err = f.Commit("queued-1", 0o644)              // fchmod, fsync, rename
//	name, sub, err := d.MkdirTemp(".tmp-", 0o755)  // a private directory
//	err = d.Rename(name, d, "final", safedir.NoReplace)
//	names, err := d.ReadDir()                      // then d.Lstat(name)
//	err = d.RemoveAll(name)
//	r, err := d.Open("capture.json")               // regular files only
//	err = d.Sync()                                 // after renames
//	err = safedir.ChmodOwned(sockPath, 0o622)      // a socket we bound
//
// Reading: Open and ReadFile open regular files only (O_NONBLOCK, so a
// FIFO cannot block the open; anything but a regular file is refused with
// ErrNotRegular), and ReadFile checks the size before reading. OpenRegular
// does the same for a path a user named on the command line.
//
// os.Root (Go 1.24) resolves names beneath a directory too, but it follows
// symbolic links that stay inside it, has no RENAME_NOREPLACE and no trust
// check; this package needs all three.
package safedir
