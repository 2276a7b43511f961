package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice/bench/internal/section"
)

// Chart geometry, in pixels.
const (
	chartWidth = 760
	rowHeight  = 26
	barHeight  = 16
	charWidth  = 7 // of the 12px sans-serif labels, roughly
	topMargin  = 40
	valueRoom  = 110 // right of the longest bar, for its value
)

// Bar colours: sluice's bars (labels starting with "sluice") and the
// others'.
const (
	sluiceColour = "#2b6cb0"
	peerColour   = "#a0aec0"
)

// svgChart draws c as a horizontal bar chart in plain SVG: one bar per
// row, its label on the left and its value at its end, scaled to the
// largest value.
func svgChart(c section.Chart) string {
	labelW := 0
	for _, b := range c.Bars {
		labelW = max(labelW, len([]rune(b.Label))*charWidth)
	}
	labelW = min(labelW+12, 320)
	barMax := float64(chartWidth - labelW - valueRoom)
	peak := 0.0
	for _, b := range c.Bars {
		peak = max(peak, b.Value)
	}
	height := topMargin + len(c.Bars)*rowHeight + 24
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartWidth, height, chartWidth, height)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	fmt.Fprintf(&sb, `<text x="8" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", xmlEscape(c.Title))
	for i, b := range c.Bars {
		y := topMargin + i*rowHeight
		w := 0.0
		if peak > 0 {
			w = b.Value / peak * barMax
		}
		colour := peerColour
		if strings.HasPrefix(b.Label, "sluice") {
			colour = sluiceColour
		}
		fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, y+barHeight-3, xmlEscape(b.Label))
		fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s</title></rect>`+"\n", labelW, y, w, barHeight, colour, xmlEscape(b.Label), xmlEscape(valueText(b.Value, c.Unit)))
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(labelW)+w+6, y+barHeight-3, xmlEscape(valueText(b.Value, c.Unit)))
	}
	axisY := topMargin + len(c.Bars)*rowHeight
	fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#4a5568"/>`+"\n", labelW, topMargin-4, labelW, axisY)
	fmt.Fprintf(&sb, `<text x="%d" y="%d" fill="#4a5568">%s</text>`+"\n", labelW, axisY+16, xmlEscape(c.Unit))
	sb.WriteString("</svg>\n")
	return sb.String()
}

// valueText formats v for a bar's end: k and M for large numbers, three
// significant digits otherwise, then the unit.
func valueText(v float64, unit string) string {
	var s string
	switch a := math.Abs(v); {
	case a >= 1e6:
		s = strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case a >= 1e4:
		s = strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case a >= 100 || a == 0:
		s = strconv.FormatFloat(v, 'f', 0, 64)
	default:
		s = strconv.FormatFloat(v, 'g', 3, 64)
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}

var xmlReplacer = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

func xmlEscape(s string) string { return xmlReplacer.Replace(s) }
