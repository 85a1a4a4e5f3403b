package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// writeChart draws claim buffers against backlog depth on log-log axes: x decades from 10^3,
// y decades from 10^1, a grey gridline per decade, blue = pgdrain, red = seed 001's claim.
func writeChart(path string, points []depthPoint) error {
	const w, h, pad = 720, 440, 60
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	white, grey, black := color.RGBA{255, 255, 255, 255}, color.RGBA{220, 220, 220, 255}, color.RGBA{0, 0, 0, 255}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, white)
		}
	}
	const x0, x1, y0, y1 = 3.0, 6.0, 1.0, 6.0 // log10 ranges
	px := func(v float64) int { return pad + int((math.Log10(v)-x0)/(x1-x0)*float64(w-2*pad)) }
	py := func(v float64) int {
		l := math.Min(math.Max(math.Log10(math.Max(v, 1)), y0), y1)
		return h - pad - int((l-y0)/(y1-y0)*float64(h-2*pad))
	}
	for d := x0; d <= x1; d++ {
		x := px(math.Pow(10, d))
		for y := pad; y <= h-pad; y++ {
			img.Set(x, y, grey)
		}
	}
	for d := y0; d <= y1; d++ {
		y := py(math.Pow(10, d))
		for x := pad; x <= w-pad; x++ {
			img.Set(x, y, grey)
		}
	}
	for x := pad; x <= w-pad; x++ {
		img.Set(x, h-pad, black)
	}
	for y := pad; y <= h-pad; y++ {
		img.Set(pad, y, black)
	}
	series := []struct {
		c   color.RGBA
		val func(depthPoint) float64
	}{
		{color.RGBA{200, 30, 30, 255}, func(p depthPoint) float64 { return p.seed }},
		{color.RGBA{30, 60, 200, 255}, func(p depthPoint) float64 { return p.pgdrain }},
	}
	for _, s := range series {
		for i, p := range points {
			x, y := px(float64(p.depth)), py(s.val(p))
			for dx := -3; dx <= 3; dx++ {
				for dy := -3; dy <= 3; dy++ {
					img.Set(x+dx, y+dy, s.c)
				}
			}
			if i > 0 {
				line(img, px(float64(points[i-1].depth)), py(s.val(points[i-1])), x, y, s.c)
			}
		}
	}
	for d := x0; d <= x1; d++ {
		label(img, px(math.Pow(10, d))-12, h-pad+16, fmt.Sprintf("1e%d", int(d)), black)
	}
	for d := y0; d <= y1; d++ {
		label(img, 8, py(math.Pow(10, d))+4, fmt.Sprintf("1e%d", int(d)), black)
	}
	label(img, w/2-90, h-12, "pending rows (backlog depth, log)", black)
	label(img, 8, 20, "shared buffers per claim_batch(q, 32) (log)", black)
	label(img, w-pad-250, 40, "blue: pgdrain claim_batch", series[1].c)
	label(img, w-pad-250, 56, "red: seed 001's claim predicate", series[0].c)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

// label writes text with its baseline at (x, y).
func label(img *image.RGBA, x, y int, text string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(text)
}

func line(img *image.RGBA, xa, ya, xb, yb int, c color.RGBA) {
	n := max(abs(xb-xa), abs(yb-ya), 1)
	for i := 0; i <= n; i++ {
		x := xa + (xb-xa)*i/n
		y := ya + (yb-ya)*i/n
		img.Set(x, y, c)
		img.Set(x, y+1, c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
