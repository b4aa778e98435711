// Package clitest drives what package cli generates through the real
// programs that read it: bash and zsh complete a line with the completion
// script loaded, groff and man render the manual page with their warnings
// on. Tests of the cli package and of the commands built on it use it.
package clitest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// Offers checks the candidates a shell offered for line: every one of want
// is there, none of not.
func Offers(t *testing.T, shell, line string, got, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s: %q offers %q, lacks %q", shell, line, got, w)
		}
	}
	for _, n := range not {
		if slices.Contains(got, n) {
			t.Errorf("%s: %q offers %q, which it should not", shell, line, n)
		}
	}
}

// quote quotes s for a shell script.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// funcName is the completion function zsh registers for prog.
func funcName(prog string) string {
	return "_" + strings.NewReplacer("-", "_", ".", "_").Replace(prog)
}

// CompleteInBash loads script into a real bash, completes line (the
// cursor at its end, as after pressing TAB) and returns the candidates.
func CompleteInBash(t *testing.T, script []byte, line string) []string {
	t.Helper()
	bash := testutil.RequireTool(t, "bash")
	dir := t.TempDir()
	path := filepath.Join(dir, "completion.bash")
	if err := os.WriteFile(path, script, 0o644); err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(line)
	if strings.HasSuffix(line, " ") || line == "" {
		words = append(words, "")
	}
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = quote(w)
	}
	// complete -p proves the script registered itself; the function is
	// then called as bash calls it on TAB.
	prog := "source " + quote(path) + ` || exit 9
spec=$(complete -p ` + quote(words[0]) + `) || exit 8
fn=${spec#*-F }; fn=${fn%% *}
COMP_WORDS=(` + strings.Join(quoted, " ") + `)
COMP_CWORD=` + strconv.Itoa(len(words)-1) + `
COMP_LINE=` + quote(line) + `
COMP_POINT=${#COMP_LINE}
"$fn" ` + quote(words[0]) + ` "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
`
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash completing %q: %v\n%s", line, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("bash completing %q printed errors:\n%s", line, stderr.String())
	}
	return strings.Fields(string(out))
}

// zshSetup runs in the interactive zsh under test: it loads the script
// with compinit, records every candidate completion offers, and binds ^T
// to complete and then mark the end.
const zshSetup = `PS1='' PROMPT='' RPROMPT=''
unsetopt autolist listambiguous automenu
setopt nobeep
autoload -Uz compinit && compinit -u -d "$SW_DIR/zcompdump"
source "$SW_DIR/completion.zsh" || print -r -- "source failed" >> "$SW_DIR/errors"
(( $+functions[$SW_FUNC] )) || print -r -- "no function $SW_FUNC" >> "$SW_DIR/errors"
[[ $_comps[$SW_PROG] == $SW_FUNC ]] || print -r -- "compdef did not register $SW_PROG" >> "$SW_DIR/errors"
compadd() {
  if (( ${@[(I)-[OAD]]} )); then builtin compadd "$@"; return; fi
  local -a hits
  builtin compadd -A hits "$@"
  (( $#hits )) && print -rl -- ${hits} >> "$SW_DIR/out"
  builtin compadd "$@"
}
zle -C sw-complete complete-word _main_complete
sw-complete-and-mark() { zle sw-complete 2>> "$SW_DIR/errors"; : >> "$SW_DIR/out"; print done > "$SW_DIR/done" }
zle -N sw-complete-and-mark
bindkey '^T' sw-complete-and-mark
`

// zshDriver types each line given into one interactive zsh on a
// pseudo-terminal (zsh's zpty), presses ^T, waits for the mark, keeps
// what was offered as out.N, and clears the line.
const zshDriver = `zmodload zsh/zpty || exit 9
zpty sw zsh -f -i
zpty -w sw "source $SW_DIR/setup.zsh"
n=0
for line in "$@"; do
  rm -f $SW_DIR/out $SW_DIR/done
  zpty -w -n sw "$line"$'\x14'
  for i in {1..1500}; do [[ -e $SW_DIR/done ]] && break; sleep 0.02; done
  [[ -e $SW_DIR/done ]] || { print -u2 "completing $line did not finish"; zpty -d sw; exit 7 }
  mv $SW_DIR/out $SW_DIR/out.$n
  (( n++ ))
  zpty -w -n sw $'\x15'
done
zpty -d sw
`

// ZshSession is a real interactive zsh with the completion system and a
// completion script loaded, set up once for many lines.
type ZshSession struct {
	t    *testing.T
	zsh  string
	dir  string
	env  []string
	prog string
}

func NewZshSession(t *testing.T, script []byte, prog string) *ZshSession {
	t.Helper()
	z := &ZshSession{t: t, zsh: testutil.RequireTool(t, "zsh"), dir: t.TempDir(), prog: prog}
	for name, data := range map[string][]byte{"completion.zsh": script, "setup.zsh": []byte(zshSetup), "drive.zsh": []byte(zshDriver)} {
		if err := os.WriteFile(filepath.Join(z.dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	z.env = append(os.Environ(), "SW_DIR="+z.dir, "SW_PROG="+prog, "SW_FUNC="+funcName(prog), "HOME="+z.dir)
	// compinit reads every completion function of the system; its dump,
	// made once, lets each session start at once.
	cmd := exec.Command(z.zsh, "-f", "-c", `autoload -Uz compinit && compinit -u -d "$SW_DIR/zcompdump"`)
	cmd.Env = z.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compinit: %v\n%s", err, out)
	}
	return z
}

// Complete completes each line (the cursor at its end) and returns the
// candidates of each.
func (z *ZshSession) Complete(lines ...string) [][]string {
	t := z.t
	t.Helper()
	os.Remove(filepath.Join(z.dir, "errors"))
	cmd := exec.Command(z.zsh, append([]string{"-f", filepath.Join(z.dir, "drive.zsh")}, lines...)...)
	cmd.Dir = z.dir
	cmd.Env = z.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("zsh completing %q: %v\n%s", lines, err, out)
	}
	if errs, _ := os.ReadFile(filepath.Join(z.dir, "errors")); len(errs) > 0 {
		t.Errorf("zsh completing %q: %s", lines, errs)
	}
	got := make([][]string, len(lines))
	for i := range lines {
		out, err := os.ReadFile(filepath.Join(z.dir, "out."+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		got[i] = strings.Fields(string(out))
	}
	return got
}

// RenderMan checks a man page with groff's warnings on and man(1)'s, and
// returns it as man prints it.
func RenderMan(t *testing.T, page []byte) string {
	t.Helper()
	groff := testutil.RequireTool(t, "groff")
	man := testutil.RequireTool(t, "man")
	path := filepath.Join(t.TempDir(), "page.1")
	if err := os.WriteFile(path, page, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(groff, "-man", "-ww", "-z", path)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("groff -man -ww -z: %v\n%s", err, stderr.String())
	}
	stderr.Reset()
	cmd = exec.Command(man, "--warnings", "-l", path)
	cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Errorf("man --warnings -l: %v\n%s", err, stderr.String())
	}
	return string(out)
}
