package eval

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The subset of JSON Schema docs/fixture.schema.json uses: type, enum,
// required, properties, additionalProperties (false), items, minItems,
// minLength, minimum, maximum, minProperties, oneOf, $ref to #/$defs/...,
// format date-time. Unknown keywords make the validator fail, so the schema
// cannot drift into what it does not check.
type schemaValidator struct{ root map[string]any }

var knownKeywords = []string{"$schema", "$id", "$defs", "$ref", "title", "description", "type", "enum", "required", "properties",
	"additionalProperties", "items", "minItems", "minLength", "minimum", "maximum", "minProperties", "oneOf", "format"}

func (v *schemaValidator) validate(s map[string]any, x any, at string) error {
	for k := range s {
		if !slices.Contains(knownKeywords, k) {
			return fmt.Errorf("schema keyword %q not supported by the test validator", k)
		}
	}
	if ref, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/$defs/")
		def, ok := v.root["$defs"].(map[string]any)[name].(map[string]any)
		if !ok {
			return fmt.Errorf("bad $ref %q", ref)
		}
		return v.validate(def, x, at)
	}
	if t, ok := s["type"]; ok {
		var types []string
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, e := range t {
				types = append(types, e.(string))
			}
		}
		if !slices.ContainsFunc(types, func(t string) bool { return hasType(x, t) }) {
			return fmt.Errorf("%s: %T is not %v", at, x, types)
		}
	}
	if e, ok := s["enum"].([]any); ok && !slices.Contains(e, x) {
		return fmt.Errorf("%s: %v not in %v", at, x, e)
	}
	if f, ok := s["format"].(string); ok && f == "date-time" {
		if str, _ := x.(string); str != "" {
			if _, err := time.Parse(time.RFC3339, str); err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
		}
	}
	if n, ok := x.(float64); ok {
		if m, ok := s["minimum"].(float64); ok && n < m {
			return fmt.Errorf("%s: %v < minimum %v", at, n, m)
		}
		if m, ok := s["maximum"].(float64); ok && n > m {
			return fmt.Errorf("%s: %v > maximum %v", at, n, m)
		}
	}
	if str, ok := x.(string); ok {
		if m, ok := s["minLength"].(float64); ok && float64(len([]rune(str))) < m {
			return fmt.Errorf("%s: shorter than %v", at, m)
		}
	}
	if arr, ok := x.([]any); ok {
		if m, ok := s["minItems"].(float64); ok && float64(len(arr)) < m {
			return fmt.Errorf("%s: fewer than %v items", at, m)
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range arr {
				if err := v.validate(items, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
	}
	if obj, ok := x.(map[string]any); ok {
		for _, r := range asStrings(s["required"]) {
			if _, ok := obj[r]; !ok {
				return fmt.Errorf("%s: %q is required", at, r)
			}
		}
		if m, ok := s["minProperties"].(float64); ok && float64(len(obj)) < m {
			return fmt.Errorf("%s: fewer than %v properties", at, m)
		}
		props, _ := s["properties"].(map[string]any)
		for k, val := range obj {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if s["additionalProperties"] == false {
					return fmt.Errorf("%s: property %q not allowed", at, k)
				}
				continue
			}
			if err := v.validate(ps, val, at+"."+k); err != nil {
				return err
			}
		}
	}
	if one, ok := s["oneOf"].([]any); ok {
		n := 0
		var errs []string
		for _, sub := range one {
			if err := v.validate(sub.(map[string]any), x, at); err == nil {
				n++
			} else {
				errs = append(errs, err.Error())
			}
		}
		if n != 1 {
			return fmt.Errorf("%s: matches %d of oneOf, want exactly 1 (%s)", at, n, strings.Join(errs, "; "))
		}
	}
	return nil
}

func hasType(x any, t string) bool {
	switch t {
	case "object":
		_, ok := x.(map[string]any)
		return ok
	case "array":
		_, ok := x.([]any)
		return ok
	case "string":
		_, ok := x.(string)
		return ok
	case "boolean":
		_, ok := x.(bool)
		return ok
	case "number":
		_, ok := x.(float64)
		return ok
	case "integer":
		n, ok := x.(float64)
		return ok && n == math.Trunc(n)
	}
	return false
}

func asStrings(x any) []string {
	var out []string
	arr, _ := x.([]any)
	for _, e := range arr {
		out = append(out, e.(string))
	}
	return out
}

func loadSchema(t *testing.T) *schemaValidator {
	t.Helper()
	b, err := os.ReadFile("../docs/fixture.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	return &schemaValidator{root: root}
}

// TestFixturesMatchSchema validates every fixture against the schema, and
// shows the schema rejects what Parse rejects.
func TestFixturesMatchSchema(t *testing.T) {
	v := loadSchema(t)
	files, _ := filepath.Glob("../fixtures/*.json")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var x any
		if err := json.Unmarshal(b, &x); err != nil {
			t.Fatal(err)
		}
		if err := v.validate(v.root, x, filepath.Base(f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, bad := range []string{"testdata/unknown_kind.json", "testdata/no_checks.json", "testdata/two_kinds.json", "testdata/cm_unknown_kind.json"} {
		b, err := os.ReadFile(bad)
		if err != nil {
			t.Fatal(err)
		}
		var x any
		_ = json.Unmarshal(b, &x)
		if err := v.validate(v.root, x, bad); err == nil {
			t.Errorf("%s: the schema accepts it", bad)
		}
	}
}

// TestSchemaKindsMatchCode: the schema names exactly the check kinds the
// runner knows.
func TestSchemaKindsMatchCode(t *testing.T) {
	v := loadSchema(t)
	check := v.root["$defs"].(map[string]any)["check"].(map[string]any)
	var kinds []string
	for k := range check["properties"].(map[string]any) {
		if k != "after_turn" && k != "description" {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, Kinds) {
		t.Fatalf("schema kinds %v, code kinds %v", kinds, Kinds)
	}
}
