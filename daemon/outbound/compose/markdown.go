package compose

import (
	"bytes"
	"strings"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
)

// goldmark takes time that grows with the square of the input (or worse)
// on some Markdown: containers nested deep on one line ("> > > …",
// "- - - …", a list indented a step more on each line) and a run of link
// openers in one block ("[a](" repeated, "[[[…]]]"). 40 KB of such text
// takes it about a second, 800 KB minutes, and it cannot be stopped once
// started: a caller, or a remote sender whose mail an agent quotes or
// forwards, would hold the daemon's CPU for as long as it liked. So before
// rendering, one linear pass estimates both costs, and a body past either
// bound goes as its text alone (as with text_only), which costs nothing to
// build and loses no word.

// MaxMarkdownNesting bounds how deep a line of the body may nest block
// containers (block quotes and list items, counted by their markers and
// the indentation before them) for the body to be rendered to HTML.
const MaxMarkdownNesting = 32

// maxLinkWork bounds the sum, over the body's blocks, of the block's link
// openers ('[') times its length: an estimate of the bytes goldmark may
// scan looking for where each link ends. Ordinary text, even a list of a
// thousand links, stays far below it; at the bound goldmark takes about a
// tenth of a second.
const maxLinkWork = 100_000_000

// renderable reports whether md can be rendered to HTML in time linear in
// its size (see above). The line pass counts every '[' of a block of
// lines; a body past maxLinkWork by that count is read again for its
// blocks (linkWork), so that brackets goldmark never looks at for links
// (those of code blocks and raw HTML: a JSON document in a fenced block)
// do not cost the body its HTML part.
func renderable(md string) bool {
	var work, blockLen, openers int
	flush := func() {
		work += blockLen * openers
		blockLen, openers = 0, 0
	}
	for line := range strings.Lines(md) {
		depth, marker := nesting(line)
		if depth > MaxMarkdownNesting {
			return false
		}
		// A block of inline text ends at a blank line or where a line
		// starts a block of its own (a list item, a quote, a heading, a
		// table row): goldmark looks for the end of a link within one.
		if marker || strings.TrimSpace(line) == "" {
			flush()
		}
		blockLen += len(line)
		openers += strings.Count(line, "[")
	}
	flush()
	return work <= maxLinkWork || linkWork(md) <= maxLinkWork
}

// blocks reads Markdown for its blocks only, with goldmark's own block
// parsers (those the renderer uses: GFM adds none) and no inline parser
// or paragraph transformer: which lines goldmark parses for inline text
// (paragraphs, headings) and which it keeps raw (code, HTML). A table is
// read as the paragraph it is written as, which counts its cells together.
var blocks = parser.NewParser(parser.WithBlockParsers(parser.DefaultBlockParsers()...))

// linkWork is the line pass's estimate over the blocks goldmark parses for
// inline text only: each such block's length times its link openers. It is
// called only after the line pass, which bounds nesting, the one shape on
// which the block parse itself takes more than linear time.
func linkWork(md string) int {
	src := []byte(md)
	return blockWork(blocks.Parse(text.NewReader(src)), src)
}

// blockWork sums, over the blocks of doc (parsed from src) that are not
// raw, each block's length times its link openers.
func blockWork(doc ast.Node, src []byte) int {
	work := 0
	ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering || n.Type() != ast.TypeBlock || n.IsRaw() {
			return ast.WalkContinue, nil
		}
		lines := n.Lines()
		size, openers := 0, 0
		for i := range lines.Len() {
			seg := lines.At(i)
			size += seg.Len()
			openers += bytes.Count(seg.Value(src), []byte("["))
		}
		work += size * openers
		return ast.WalkContinue, nil
	})
	return work
}

// nesting estimates how deep line nests block containers: each '>' and
// list marker at its start, and each two columns of indentation before the
// first (a nested list item is indented past its parent's marker). marker
// says the line starts a block of its own.
func nesting(line string) (depth int, marker bool) {
	indent, i := 0, 0
	for ; i < len(line); i++ {
		switch line[i] {
		case ' ':
			if !marker {
				indent++
			}
			continue
		case '\t':
			if !marker {
				indent += 4
			}
			continue
		case '>':
			depth++
			marker = true
			continue
		case '-', '*', '+':
			if i+1 == len(line) || line[i+1] == ' ' || line[i+1] == '\t' || line[i+1] == '\n' || line[i+1] == '\r' {
				depth++
				marker = true
				continue
			}
		case '#', '|':
			marker = true
		default:
			if j := digitsEnd(line, i); j > i && j < len(line) && (line[j] == '.' || line[j] == ')') &&
				(j+1 == len(line) || line[j+1] == ' ' || line[j+1] == '\t' || line[j+1] == '\n' || line[j+1] == '\r') {
				depth++
				marker = true
				i = j
				continue
			}
		}
		break
	}
	if marker {
		depth += indent / 2
	}
	return depth, marker
}

// digitsEnd is the index after the run of at most nine digits (a list
// number, CommonMark's bound) at line[i:].
func digitsEnd(line string, i int) int {
	j := i
	for j < len(line) && j-i < 9 && '0' <= line[j] && line[j] <= '9' {
		j++
	}
	return j
}
