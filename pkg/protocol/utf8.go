package protocol

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Every string of the protocol is UTF-8 (msgpack str is UTF-8 by
// definition): a request with one that is not, whether it came as a str or
// as a bin decoded into a string field, is refused (CodeBadRequest) before
// anything is done with it. Otherwise it would be kept and echoed as a str
// to every client that lists jobs or follows events, and clients that
// decode str strictly (msgpack for Python with raw=False, JavaScript's
// TextDecoder in fatal mode) could no longer read those replies.

// checkUTF8 returns a CodeBadRequest *Error naming the first string in v
// (a decoded request value: a pointer to its struct) that is not valid
// UTF-8, or nil. what names the value in the message ("spawn args").
// Byte fields ([]byte, RawMessage) are not strings and are not looked at.
func checkUTF8(v any, what string) error {
	bad, ok := invalidString(reflect.ValueOf(v), "")
	if ok {
		return nil
	}
	return Errorf(CodeBadRequest, "decode %s: %s is not valid UTF-8 (%.40q): strings must be UTF-8 (bytes that are not go in bin fields such as write's data)",
		what, bad.path, bad.s)
}

// badString is a string that is not valid UTF-8 and where it is.
type badString struct{ path, s string }

// invalidString walks v and reports the first string in it that is not
// valid UTF-8 (ok false), with its path: struct fields by their msgpack
// names, argv[1], labels["team"], labels key "\xff". Map entries are
// visited in key order, so the one named does not depend on map order.
func invalidString(v reflect.Value, path string) (badString, bool) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); !utf8.ValidString(s) {
			return badString{path, s}, false
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return invalidString(v.Elem(), path)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
			switch {
			case name == "-":
				continue
			case name == "" && f.Anonymous:
				name = path // (inlined)
			case name == "":
				name = join(path, f.Name)
			default:
				name = join(path, name)
			}
			if bad, ok := invalidString(v.Field(i), name); !ok {
				return bad, false
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return badString{}, true // bytes, not a string
		}
		for i := 0; i < v.Len(); i++ {
			if bad, ok := invalidString(v.Index(i), path+"["+strconv.Itoa(i)+"]"); !ok {
				return bad, false
			}
		}
	case reflect.Map:
		var first badString
		firstKey, found := "", false
		for it := v.MapRange(); it.Next(); {
			k := it.Key()
			key := fmt.Sprint(k.Interface())
			if found && key >= firstKey {
				continue
			}
			bad, ok := invalidString(k, path+" key "+strconv.Quote(key))
			if ok {
				bad, ok = invalidString(it.Value(), path+"["+strconv.Quote(key)+"]")
			}
			if !ok {
				first, firstKey, found = bad, key, true
			}
		}
		if found {
			return first, false
		}
	}
	return badString{}, true
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// validUTF8 returns s, or s with each run of bytes that are not valid
// UTF-8 replaced by U+FFFD (for text the server sends that may quote
// bytes it did not check).
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// validUTF8 reports whether every string of e is valid UTF-8.
func (e *Error) validUTF8() bool {
	if !utf8.ValidString(e.Message) || !utf8.ValidString(string(e.Code)) {
		return false
	}
	for k, v := range e.Details {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
	}
	return true
}
