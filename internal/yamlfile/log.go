package yamlfile

import (
	"io"
	"log/slog"
	"slices"
)

// Log is the log section of a config file: `log: {level: info, format: json}`, written to
// standard error.
type Log struct {
	// Level is debug, info (the default), warn or error.
	Level string `yaml:"level"`
	// Format is json (the default) or text.
	Format string `yaml:"format"`
}

// Check reports a level or format the file may not have, at path (the log section's path).
func (l Log) Check(p *Problems, path ...string) {
	if !slices.Contains([]string{"", "debug", "info", "warn", "error"}, l.Level) {
		p.At(append(slices.Clone(path), "level"), "must be debug, info, warn or error, got %q", l.Level)
	}
	if !slices.Contains([]string{"", "json", "text"}, l.Format) {
		p.At(append(slices.Clone(path), "format"), "must be json or text, got %q", l.Format)
	}
}

// Logger returns the logger l asks for, writing to w.
func (l Log) Logger(w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(l.Level)) // checked; "" keeps info
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
