// Package docs holds no code: its tests check the documentation against the
// tree (make docs-check, and make test).
//
//   - Every relative link in README.md, CONTRIBUTING.md, deploy/README.md and
//     docs/*.md names a file of the repository, and every #anchor a heading
//     of its target, by GitHub's heading-to-anchor rule. Links that leave the repository fail:
//     a reader of a fresh clone could not follow them.
//   - The layout table of docs/architecture.md names every package under
//     pkg/.
//   - README.md stays at most 600 lines: it is for users, and the depth
//     belongs in docs/.
//   - The README's quickstart blocks (a ```sh block right after the marker
//     <!-- docs-check: run -->) run as shown against the built binaries in
//     $ZONEFLEET_BIN_DIR, in a fresh directory with a fresh HOME: every line
//     must exit 0, a line ending in & runs in the background until it prints
//     "Ready.", `kill %N` stops background job N and expects a clean exit, and
//     a line whose comment says "prints WORD" must print WORD.
package docs
