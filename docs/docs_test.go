package docs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxReadmeLines bounds README.md: a newcomer reads it in ten minutes.
const maxReadmeLines = 600

// repoRoot is the repository's top directory (this package lives in docs/).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "docs tests run from the docs/ directory of the repository")
	return root
}

// documents are the Markdown files whose links are checked: the README,
// CONTRIBUTING.md, the operator's guide in deploy/ and docs/*.md.
func documents(t testing.TB, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs, "docs/*.md")
	return append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md"),
		filepath.Join(root, "deploy", "README.md")}, docs...)
}

var (
	fence      = regexp.MustCompile("(?ms)^```.*?^```[ \t]*$")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	mdLink     = regexp.MustCompile(`!?\[[^\]\n]*\]\(([^)\s]+)\)`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading    = regexp.MustCompile(`^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	notInSlug  = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	stripLinks = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// slug is GitHub's anchor for a heading's text: lower case, the Markdown
// link syntax and every character but letters, digits, spaces, hyphens and
// underscores dropped, spaces turned into hyphens.
func slug(text string) string {
	text = stripLinks.ReplaceAllString(text, "$1")
	text = strings.ToLower(text)
	text = notInSlug.ReplaceAllString(text, "")
	return strings.ReplaceAll(text, " ", "-")
}

// anchors are the anchors of a Markdown file's headings (outside code
// fences); a repeated heading gets -1, -2, … as on GitHub.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(fence.ReplaceAllString(md, ""), "\n") {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// brokenLinks lists the relative links of the Markdown file path that do not
// resolve inside root: a missing file, a target outside the repository, or
// an anchor that is no heading of its Markdown target.
func brokenLinks(root, path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	text := codeSpan.ReplaceAllString(fence.ReplaceAllString(string(b), ""), "")
	rel, _ := filepath.Rel(root, path)
	var bad []string
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if scheme.MatchString(target) {
			continue // http(s), mailto: not checked here
		}
		file, anchor, _ := strings.Cut(target, "#")
		dest := path
		if file != "" {
			dest = filepath.Clean(filepath.Join(filepath.Dir(path), file))
		}
		if r, err := filepath.Rel(root, dest); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			bad = append(bad, fmt.Sprintf("%s: %s leaves the repository", rel, target))
			continue
		}
		if _, err := os.Stat(dest); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %s: no such file", rel, target))
			continue
		}
		if anchor == "" || !strings.HasSuffix(dest, ".md") {
			continue
		}
		md, err := os.ReadFile(dest)
		if err != nil {
			return nil, err
		}
		if !anchors(string(md))[anchor] {
			bad = append(bad, fmt.Sprintf("%s: %s: no heading with anchor #%s", rel, target, anchor))
		}
	}
	return bad, nil
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Measured figures", "measured-figures"},
		{"Run a cluster: `make run`", "run-a-cluster-make-run"},
		{"zctl's cluster configuration", "zctls-cluster-configuration"},
		{"Virtual machines: free page reporting", "virtual-machines-free-page-reporting"},
		{"ZNS+", "zns"},
		{"Runbook: ZoneFleetSSDNodeDown", "runbook-zonefleetssdnodedown"},
		{"Tests (`test/deploy`)", "tests-testdeploy"},
		{"see [the doc](x.md) here", "see-the-doc-here"},
		{"snake_case and dash-ed", "snake_case-and-dash-ed"},
	} {
		assert.Equal(t, tc.want, slug(tc.heading), tc.heading)
	}
}

// The checker itself finds what it must: a missing file, a missing anchor, a
// link out of the repository; and accepts good links, links in code, and
// repeated headings' suffixed anchors.
func TestBrokenLinksFindsEachKind(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "docs", "b.md"), []byte("# B\n\n## Part\n\n## Part\n\n```\n# not a heading\n```\n"), 0o644))
	readme := filepath.Join(root, "README.md")
	require.NoError(t, os.WriteFile(readme, []byte(strings.Join([]string{
		"# Top",
		"[ok](docs/b.md) [ok](docs/b.md#part) [ok](docs/b.md#part-1) [ok](#top) [web](https://example.com/x)",
		"`[in code](nowhere.md)`",
		"```",
		"[in a fence](nowhere.md)",
		"```",
		"[missing](docs/none.md)",
		"[bad anchor](docs/b.md#not-a-heading)",
		"[fenced heading](docs/b.md#not-a-heading-1)",
		"[outside](../outside.md)",
		"[self anchor](#nope)",
	}, "\n")), 0o644))
	bad, err := brokenLinks(root, readme)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"README.md: docs/none.md: no such file",
		"README.md: docs/b.md#not-a-heading: no heading with anchor #not-a-heading",
		"README.md: docs/b.md#not-a-heading-1: no heading with anchor #not-a-heading-1",
		"README.md: ../outside.md leaves the repository",
		"README.md: #nope: no heading with anchor #nope",
	}, bad)
}

// Every relative link and anchor of the documentation resolves.
func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	for _, doc := range documents(t, root) {
		bad, err := brokenLinks(root, doc)
		require.NoError(t, err)
		assert.Empty(t, bad, "broken links")
	}
}

func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	lines := bytes.Count(b, []byte("\n"))
	assert.LessOrEqual(t, lines, maxReadmeLines, "README.md has %d lines (wc -l); move depth into docs/", lines)
}

// quickstartMarker precedes each README block the quickstart test runs.
const quickstartMarker = "<!-- docs-check: run -->"

// quickstart returns the command lines of the marked ```sh blocks of md,
// continuation lines (ending in \) joined.
func quickstart(md string) ([]string, error) {
	var cmds []string
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != quickstartMarker {
			continue
		}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j >= len(lines) || strings.TrimSpace(lines[j]) != "```sh" {
			return nil, fmt.Errorf("line %d: %s is not followed by a ```sh block", i+1, quickstartMarker)
		}
		var cont string
		for j++; ; j++ {
			if j >= len(lines) {
				return nil, fmt.Errorf("line %d: unterminated ```sh block", i+1)
			}
			l := lines[j]
			if strings.TrimSpace(l) == "```" {
				break
			}
			if strings.HasSuffix(l, "\\") {
				cont += strings.TrimSuffix(l, "\\") + " "
				continue
			}
			if l = cont + l; strings.TrimSpace(l) != "" {
				cmds = append(cmds, l)
			}
			cont = ""
		}
		i = j
	}
	return cmds, nil
}

var (
	trailingComment = regexp.MustCompile(`\s+#\s(.*)$`)
	printsWord      = regexp.MustCompile(`\bprints\s+([^\s,;:]+)`)
	killJob         = regexp.MustCompile(`^kill\s+%([0-9]+)$`)
)

// split separates a command line from its trailing comment and says what
// the comment promises it prints ("" for nothing).
func split(line string) (cmd, prints string) {
	cmd, comment := line, ""
	if m := trailingComment.FindStringSubmatchIndex(line); m != nil {
		cmd, comment = line[:m[0]], line[m[2]:m[3]]
	}
	if m := printsWord.FindStringSubmatch(comment); m != nil {
		prints = m[1]
	}
	return strings.TrimSpace(cmd), prints
}

func TestQuickstartParsing(t *testing.T) {
	md := "x\n" + quickstartMarker + "\n\n```sh\na --b   # comment\nlong \\\n  --flag &   # background\necho hi | cat   # prints hi, then more\nkill %1\n```\n```sh\nnot marked\n```\n"
	cmds, err := quickstart(md)
	require.NoError(t, err)
	require.Equal(t, []string{"a --b   # comment", "long    --flag &   # background", "echo hi | cat   # prints hi, then more", "kill %1"}, cmds)
	for _, tc := range []struct{ line, cmd, prints string }{
		{cmds[0], "a --b", ""},
		{cmds[1], "long    --flag &", ""},
		{cmds[2], "echo hi | cat", "hi"},
		{"echo a#b", "echo a#b", ""},
	} {
		cmd, prints := split(tc.line)
		assert.Equal(t, tc.cmd, cmd)
		assert.Equal(t, tc.prints, prints)
	}
	_, err = quickstart(quickstartMarker + "\n```go\nx\n```\n")
	assert.Error(t, err, "a marker before a non-sh block")
	_, err = quickstart(quickstartMarker + "\n```sh\nx\n")
	assert.Error(t, err, "an unterminated block")
}

// background is a quickstart line ending in &.
type background struct {
	line    string
	cmd     *exec.Cmd
	out     *syncBuffer
	done    chan error
	stopped bool // its exit was received from done
}

// syncBuffer collects a process's output for failure messages.
type syncBuffer struct {
	ch  chan string
	buf strings.Builder
}

func (b *syncBuffer) String() string {
	for {
		select {
		case l := <-b.ch:
			b.buf.WriteString(l)
		default:
			return b.buf.String()
		}
	}
}

// The README's quickstart runs as shown against the built binaries, in a
// fresh directory with a fresh HOME (so zctl's config file is its own).
func TestReadmeQuickstartRuns(t *testing.T) {
	binDir := os.Getenv("ZONEFLEET_BIN_DIR")
	if binDir == "" {
		t.Skip("ZONEFLEET_BIN_DIR is not set: the quickstart runs the built binaries; `make docs-check` and `make test` set it to bin/")
	}
	root := repoRoot(t)
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	cmds, err := quickstart(string(md))
	require.NoError(t, err)
	require.NotEmpty(t, cmds, "README.md has no block marked %s", quickstartMarker)

	bin, err := filepath.Abs(binDir)
	require.NoError(t, err)
	work := t.TempDir()
	require.NoError(t, os.Symlink(bin, filepath.Join(work, "bin")))
	env := []string{"HOME=" + work, "XDG_CONFIG_HOME=" + filepath.Join(work, ".config"), "PATH=" + os.Getenv("PATH")}

	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-10*time.Second))
		defer cancel()
	}

	var jobs []*background
	t.Cleanup(func() {
		for _, j := range jobs {
			if !j.stopped {
				_ = j.cmd.Process.Kill()
				<-j.done
			}
		}
	})
	for _, line := range cmds {
		cmd, prints := split(line)
		if m := killJob.FindStringSubmatch(cmd); m != nil {
			n, _ := strconv.Atoi(m[1])
			require.True(t, n >= 1 && n <= len(jobs), "%q: no background job %d", line, n)
			j := jobs[n-1]
			require.NoError(t, j.cmd.Process.Signal(syscall.SIGTERM), line)
			select {
			case err := <-j.done:
				j.stopped = true
				require.NoError(t, err, "%q: %q did not stop cleanly:\n%s", line, j.line, j.out)
			case <-ctx.Done():
				t.Fatalf("%q: %q still running:\n%s", line, j.line, j.out)
			}
			continue
		}
		if bg, ok := strings.CutSuffix(cmd, "&"); ok {
			jobs = append(jobs, startBackground(ctx, t, work, env, strings.TrimSpace(bg), line))
			continue
		}
		c := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmd)
		c.Dir, c.Env = work, env
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%q failed:\n%s", line, out)
		if prints != "" {
			assert.Contains(t, string(out), prints, "%q promises to print %q", line, prints)
		}
	}
}

// startBackground runs a quickstart line ending in & and waits until it
// prints a line starting with "Ready." (zctl local up's, once it serves).
func startBackground(ctx context.Context, t *testing.T, dir string, env []string, cmd, line string) *background {
	t.Helper()
	c := exec.Command("bash", "-c", "exec "+cmd)
	c.Dir, c.Env = dir, env
	pr, pw := io.Pipe()
	c.Stdout, c.Stderr = pw, pw
	require.NoError(t, c.Start(), line)
	j := &background{line: line, cmd: c, out: &syncBuffer{ch: make(chan string, 4096)}, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			select {
			case j.out.ch <- sc.Text() + "\n":
			default:
			}
			if !once && strings.HasPrefix(sc.Text(), "Ready.") {
				once = true
				close(ready)
			}
		}
	}()
	go func() {
		err := c.Wait()
		_ = pw.Close()
		j.done <- err
	}()
	select {
	case <-ready:
	case err := <-j.done:
		j.done <- err
		t.Fatalf("%q exited before it was ready (%v):\n%s", line, err, j.out)
	case <-ctx.Done():
		t.Fatalf("%q not ready before the test's deadline:\n%s", line, j.out)
	}
	return j
}

// The layout table of docs/architecture.md names every package under pkg/
// (as `pkg/<path>`), so a new package cannot go undocumented.
func TestLayoutCoversEveryPackage(t *testing.T) {
	root := repoRoot(t)
	md, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	require.NoError(t, err)
	_, layout, ok := strings.Cut(string(md), "\n## Layout\n")
	require.True(t, ok, "docs/architecture.md has a ## Layout section")
	layout, _, _ = strings.Cut(layout, "\n## ")
	var missing []string
	err = filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" {
			return err
		}
		gofiles, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil || len(gofiles) == 0 {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if !strings.Contains(layout, "`"+filepath.ToSlash(rel)+"`") {
			missing = append(missing, rel)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, missing, "packages missing from the layout table of docs/architecture.md")
}
