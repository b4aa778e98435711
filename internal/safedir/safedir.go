package safedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is matched (errors.Is) by an *UnsafeError.
var ErrUnsafe = errors.New("directory writable by another user")

// ErrNotRegular is returned for a name that is not a regular file (a FIFO,
// a device, a socket, a directory, a symbolic link).
var ErrNotRegular = errors.New("not a regular file")

// UnsafeError says that a directory is writable by a user other than us or
// root, and how to fix it.
type UnsafeError struct {
	Path string
	UID  uint32      // the directory's owner
	Mode fs.FileMode // its permission bits, with fs.ModeSticky
	EUID int         // who we are
}

func (e *UnsafeError) Error() string {
	foreign := int(e.UID) != e.EUID && e.UID != 0
	var who string
	switch {
	case foreign:
		who = fmt.Sprintf("its owner, uid %d", e.UID)
	case e.Mode&0o002 != 0:
		who = "every user"
	default:
		who = "its group"
	}
	fix := fmt.Sprintf("`chmod go-w %s`", e.Path)
	if foreign {
		fix = fmt.Sprintf("`chown %d %s` and `chmod go-w %s`, or run stallwatch as uid %d", e.EUID, e.Path, e.Path, e.UID)
	}
	return fmt.Sprintf("%s (mode %v, owner uid %d) can be written by %s, who could redirect what stallwatch, as uid %d, writes there; "+
		"use a directory that only uid %d or root can write (a shared one must be sticky, as /tmp is), or fix this one: %s",
		e.Path, e.Mode, e.UID, who, e.EUID, e.EUID, fix)
}

// Is makes errors.Is(err, ErrUnsafe) true.
func (e *UnsafeError) Is(target error) bool { return target == ErrUnsafe }

// Dir is an open directory. Its methods take names of one path component
// and act relative to the descriptor, never through a path. A Dir is safe
// for concurrent use; Close it when done.
type Dir struct {
	fd   int
	name string // for messages only
}

// Name is the path the directory was opened by, for messages.
func (d *Dir) Name() string { return d.name }

// Fd is the directory's descriptor, valid until Close.
func (d *Dir) Fd() int { return d.fd }

// Close releases the descriptor.
func (d *Dir) Close() error {
	if d == nil || d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// Open opens the existing directory path (symbolic links on the way are
// followed: the path is the operator's) and refuses it when another user
// can write it.
func Open(path string) (*Dir, error) { return checked(openPath(path)) }

// OpenForRead opens the existing directory path without the trust check,
// to read files from it (Open and ReadFile on the result never follow a
// link and never block on a FIFO). Do not write through it.
func OpenForRead(path string) (*Dir, error) { return openPath(path) }

// MkdirAll opens path like Open, creating it and any missing parents with
// perm first. Directories it creates are created with mkdirat relative to
// their parent and checked to be ours before they are used.
func MkdirAll(path string, perm fs.FileMode) (*Dir, error) { return checked(mkdirAll(path, perm)) }

// checked passes on d when it is trusted, and closes it when not.
func checked(d *Dir, err error) (*Dir, error) {
	if err != nil {
		return nil, err
	}
	if err := d.Check(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// mkdirAll opens path, creating what is missing. Only the directory we
// write into is checked (see the package doc), not those above it.
func mkdirAll(path string, perm fs.FileMode) (*Dir, error) {
	d, err := openPath(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	clean := filepath.Clean(path)
	parentPath, base := filepath.Split(clean)
	if base == "" || base == "." || base == ".." || parentPath == clean {
		return nil, err
	}
	if parentPath == "" {
		parentPath = "."
	}
	parent, err := mkdirAll(parentPath, perm)
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	d, err = parent.Mkdir(base, perm)
	if err != nil {
		return nil, err
	}
	d.name = clean
	return d, nil
}

// Wrap takes a directory opened elsewhere (it is duplicated; f stays the
// caller's) without the trust check: for a directory shared by design,
// where writing relative to the descriptor with O_NOFOLLOW is what keeps
// us safe. name is for messages.
func Wrap(f *os.File, name string) (*Dir, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "dup", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: name, Err: unix.ENOTDIR}
	}
	return &Dir{fd: fd, name: name}, nil
}

func openPath(path string) (*Dir, error) {
	if path == "" {
		path = "."
	}
	fd, err := openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, name: filepath.Clean(path)}, nil
}

// Check refuses the directory when a user other than us or root can write
// it (see the package doc).
func (d *Dir) Check() error {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: d.name, Err: err}
	}
	return checkTrust(d.name, &st, os.Geteuid())
}

func checkTrust(name string, st *unix.Stat_t, euid int) error {
	ownerOK := int(st.Uid) == euid || st.Uid == 0
	sticky := st.Mode&unix.S_ISVTX != 0
	if ownerOK && (st.Mode&0o022 == 0 || sticky) {
		return nil
	}
	mode := fs.ModeDir | fs.FileMode(st.Mode&0o777)
	if sticky {
		mode |= fs.ModeSticky
	}
	return &UnsafeError{Path: name, UID: st.Uid, Mode: mode, EUID: euid}
}

// validName refuses anything but one path component.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%q is not a single path component", name)
	}
	return nil
}

func (d *Dir) path(name string) string { return d.name + "/" + name }

// noOpenat2 is set once openat2 is known to be missing (kernels < 5.6).
var noOpenat2 bool

// openat opens name relative to dirfd. beneath restricts it to one
// component that is not a symbolic link (O_NOFOLLOW; with openat2 also
// RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS).
func openat(dirfd int, name string, flags int, mode uint32, beneath bool) (int, error) {
	flags |= unix.O_CLOEXEC
	if beneath {
		flags |= unix.O_NOFOLLOW
		if !noOpenat2 {
			how := &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
			if flags&unix.O_CREAT != 0 {
				how.Mode = uint64(mode)
			}
			for {
				fd, err := unix.Openat2(dirfd, name, how)
				if err == unix.EINTR {
					continue
				}
				if err != unix.ENOSYS {
					return fd, err
				}
				noOpenat2 = true
				break
			}
		}
	}
	for {
		fd, err := unix.Openat(dirfd, name, flags, mode)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// OpenDir opens the existing subdirectory name (not a symbolic link) and
// checks it like Open.
func (d *Dir) OpenDir(name string) (*Dir, error) {
	if err := validName(name); err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(name), Err: err}
	}
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, true)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(name), Err: err}
	}
	return checked(&Dir{fd: fd, name: d.path(name)}, nil)
}

// Mkdir creates the subdirectory name with perm (not masked by the umask)
// and opens it; a directory already there is opened and checked instead.
func (d *Dir) Mkdir(name string, perm fs.FileMode) (*Dir, error) {
	if err := validName(name); err != nil {
		return nil, &fs.PathError{Op: "mkdir", Path: d.path(name), Err: err}
	}
	err := unix.Mkdirat(d.fd, name, 0o700)
	if errors.Is(err, unix.EEXIST) {
		return d.OpenDir(name)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "mkdir", Path: d.path(name), Err: err}
	}
	return d.adoptDir(name, perm)
}

// adoptDir opens the directory we just made and sets its mode, after
// making sure it is still ours (in a directory others could write, it
// might have been swapped in the meantime).
func (d *Dir) adoptDir(name string, perm fs.FileMode) (*Dir, error) {
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, true)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(name), Err: err}
	}
	sub := &Dir{fd: fd, name: d.path(name)}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		sub.Close()
		return nil, &fs.PathError{Op: "stat", Path: sub.name, Err: err}
	}
	if int(st.Uid) != os.Geteuid() {
		sub.Close()
		return nil, fmt.Errorf("%s: the directory just created was replaced by one of uid %d", sub.name, st.Uid)
	}
	if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
		sub.Close()
		return nil, &fs.PathError{Op: "chmod", Path: sub.name, Err: err}
	}
	return sub, nil
}

// MkdirTemp creates a new subdirectory named prefix plus a random suffix,
// with perm, and returns its name and the open directory.
func (d *Dir) MkdirTemp(prefix string, perm fs.FileMode) (string, *Dir, error) {
	for range 10000 {
		name := prefix + randomSuffix()
		if err := validName(name); err != nil {
			return "", nil, &fs.PathError{Op: "mkdirtemp", Path: d.path(name), Err: err}
		}
		err := unix.Mkdirat(d.fd, name, 0o700)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", nil, &fs.PathError{Op: "mkdirtemp", Path: d.path(name), Err: err}
		}
		sub, err := d.adoptDir(name, perm)
		if err != nil {
			return "", nil, err
		}
		return name, sub, nil
	}
	return "", nil, &fs.PathError{Op: "mkdirtemp", Path: d.path(prefix + "*"), Err: fs.ErrExist}
}

// RenameFlag changes what Rename does when the new name exists.
type RenameFlag uint

const (
	// Replace replaces a file at the new name (rename(2)).
	Replace RenameFlag = 0
	// NoReplace fails with an error matching fs.ErrExist instead
	// (renameat2 RENAME_NOREPLACE). Without it, rename(2) silently
	// replaces an empty directory.
	NoReplace RenameFlag = unix.RENAME_NOREPLACE
)

// Rename renames old in d to new in to (which may be d).
func (d *Dir) Rename(old string, to *Dir, new string, flag RenameFlag) error {
	if err := validName(old); err != nil {
		return &os.LinkError{Op: "rename", Old: d.path(old), New: to.path(new), Err: err}
	}
	if err := validName(new); err != nil {
		return &os.LinkError{Op: "rename", Old: d.path(old), New: to.path(new), Err: err}
	}
	err := unix.Renameat2(d.fd, old, to.fd, new, uint(flag))
	if flag == NoReplace && (err == unix.EINVAL || err == unix.ENOSYS) {
		// A file system without RENAME_NOREPLACE. In a directory only
		// we can write, checking first is as good.
		var st unix.Stat_t
		switch serr := unix.Fstatat(to.fd, new, &st, unix.AT_SYMLINK_NOFOLLOW); {
		case serr == nil:
			err = unix.EEXIST
		case serr != unix.ENOENT:
			err = serr
		default:
			err = unix.Renameat(d.fd, old, to.fd, new)
		}
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: d.path(old), New: to.path(new), Err: err}
	}
	return nil
}

// Remove removes the file, link or empty directory name.
func (d *Dir) Remove(name string) error {
	if err := validName(name); err != nil {
		return &fs.PathError{Op: "remove", Path: d.path(name), Err: err}
	}
	err := unix.Unlinkat(d.fd, name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: d.path(name), Err: err}
	}
	return nil
}

// maxRemoveDepth bounds RemoveAll's descent: stallwatch's own trees are
// one or two levels deep.
const maxRemoveDepth = 32

// RemoveAll removes name and everything under it. Symbolic links are
// removed, never followed; a name that does not exist is not an error.
func (d *Dir) RemoveAll(name string) error {
	if err := validName(name); err != nil {
		return &fs.PathError{Op: "removeall", Path: d.path(name), Err: err}
	}
	if err := removeAllAt(d.fd, name, 0); err != nil {
		return &fs.PathError{Op: "removeall", Path: d.path(name), Err: err}
	}
	return nil
}

func removeAllAt(dirfd int, name string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	if depth >= maxRemoveDepth {
		return fmt.Errorf("%s: more than %d directories deep", name, maxRemoveDepth)
	}
	fd, err := openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, true)
	switch {
	case err == unix.ENOENT:
		return nil
	case err == unix.ELOOP || err == unix.ENOTDIR:
		// Replaced by a link or a file since the unlink: remove that.
		return ignoreENOENT(unix.Unlinkat(dirfd, name, 0))
	case err != nil:
		return err
	}
	sub := os.NewFile(uintptr(fd), name)
	defer sub.Close()
	var errs []error
	for {
		names, rerr := sub.Readdirnames(256)
		for _, n := range names {
			if err := removeAllAt(fd, n, depth+1); err != nil {
				errs = append(errs, fmt.Errorf("%s/%w", name, err))
			}
		}
		if rerr != nil || len(names) == 0 {
			break
		}
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func ignoreENOENT(err error) error {
	if err == unix.ENOENT {
		return nil
	}
	return err
}

// ReadDir returns the names in the directory, unsorted.
func (d *Dir) ReadDir() ([]string, error) {
	fd, err := openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.name, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.name)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return names, &fs.PathError{Op: "readdir", Path: d.name, Err: err}
	}
	return names, nil
}

// Lstat describes name without following it.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) {
	if err := validName(name); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: d.path(name), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: d.path(name), Err: err}
	}
	return newFileInfo(name, &st), nil
}

// Sync flushes the directory itself (its entries) to disk: after a
// rename, to make the new name durable.
func (d *Dir) Sync() error {
	if err := unix.Fsync(d.fd); err != nil {
		return &fs.PathError{Op: "sync", Path: d.name, Err: err}
	}
	return nil
}

// Chmod sets the mode of name, which must be ours (owned by our effective
// uid) and not a symbolic link: for a socket we just bound, whose path
// only bind(2) could create. It opens name with O_PATH|O_NOFOLLOW and
// changes the inode it opened (through /proc/self/fd, as an O_PATH
// descriptor has no fchmod), so a link swapped in between is never
// followed.
func (d *Dir) Chmod(name string, perm fs.FileMode) error {
	if err := validName(name); err != nil {
		return &fs.PathError{Op: "chmod", Path: d.path(name), Err: err}
	}
	fd, err := openat(d.fd, name, unix.O_PATH, 0, true)
	if err != nil {
		return &fs.PathError{Op: "chmod", Path: d.path(name), Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "chmod", Path: d.path(name), Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return &fs.PathError{Op: "chmod", Path: d.path(name), Err: unix.ELOOP}
	case int(st.Uid) != os.Geteuid():
		return &fs.PathError{Op: "chmod", Path: d.path(name), Err: fmt.Errorf("owned by uid %d, not ours: %w", st.Uid, fs.ErrPermission)}
	}
	if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), uint32(perm.Perm())); err != nil {
		return &fs.PathError{Op: "chmod", Path: d.path(name), Err: err}
	}
	return nil
}

// ChmodOwned is Dir.Chmod on path, relative to its directory opened
// without the trust check (the directory may be shared: the checks on the
// file itself are what keep us safe).
func ChmodOwned(path string, perm fs.FileMode) error {
	dir, base := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	d, err := openPath(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Chmod(base, perm)
}
