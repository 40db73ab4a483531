//! A JSON Schema validator for the subset that tool output schemas use.
//!
//! The structured-content checks validate a tool's `structuredContent` against the
//! `outputSchema` it declared. A full JSON Schema 2020-12 implementation would be a
//! dependency this crate does not take (it depends on serde, serde_json and clap only), so
//! this one checks the keywords that decide the shape of a value and ignores the rest:
//!
//! - checked: `type` (one name or a list; `integer` is a number without a fraction), `enum`,
//!   `const`, `properties`, `required`, `additionalProperties`, `minProperties`,
//!   `maxProperties`, `items` (a schema, or draft-07's list), `prefixItems`, `minItems`,
//!   `maxItems`, `uniqueItems`, `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`
//!   (2020-12 numbers), `minLength`, `maxLength` (in characters), `allOf`, `anyOf`,
//!   `oneOf`, `not`, `if`/`then`/`else`, `$ref` to a JSON pointer inside the same schema
//!   (`#/$defs/…`, `#/definitions/…`, `#`), and the boolean schemas `true` and `false`;
//! - ignored (never a failure): `pattern` and `patternProperties` (no regex engine here),
//!   `format`, `multipleOf`, `dependentRequired`, `dependentSchemas`, `contains`,
//!   `unevaluated*`, `$ref` to anything but a local pointer, and every annotation.
//!
//! Composition is bounded (a depth of 64) so that a recursive `$ref` cannot loop.

use serde_json::Value;

/// How deep `$ref`s and subschemas may nest before validation gives up on a branch.
const MAX_DEPTH: usize = 64;

/// `Ok(())` when `value` fits `schema` as far as the supported keywords tell; otherwise
/// the first mismatch, naming where in the value it is (a JSON pointer) and the keyword.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    Validator { root: schema }.check(schema, value, "", 0)
}

struct Validator<'s> {
    root: &'s Value,
}

impl Validator<'_> {
    fn check(&self, schema: &Value, value: &Value, at: &str, depth: usize) -> Result<(), String> {
        let here = if at.is_empty() { "the value" } else { at };
        if depth > MAX_DEPTH {
            return Err(format!(
                "{here}: schema nests deeper than {MAX_DEPTH} levels"
            ));
        }
        let schema = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(format!("{here}: the schema `false` admits nothing")),
            Value::Object(schema) => schema,
            // Not a schema: nothing to hold the value to.
            _ => return Ok(()),
        };
        let keyword = |k: &str| schema.get(k);
        if let Some(reference) = keyword("$ref").and_then(Value::as_str)
            && let Some(target) = self.resolve(reference)
        {
            self.check(target, value, at, depth + 1)?;
        }
        if let Some(types) = keyword("type")
            && !type_matches(types, value)
        {
            return Err(format!(
                "{here}: expected type {types}, got {}",
                type_name(value)
            ));
        }
        if let Some(Value::Array(choices)) = keyword("enum")
            && !choices.iter().any(|c| json_equal(c, value))
        {
            return Err(format!(
                "{here}: expected one of {}, got {value}",
                Value::Array(choices.clone())
            ));
        }
        if let Some(constant) = keyword("const")
            && !json_equal(constant, value)
        {
            return Err(format!("{here}: expected {constant} (const), got {value}"));
        }
        match value {
            Value::Object(object) => self.check_object(schema, object, at, depth)?,
            Value::Array(items) => self.check_array(schema, items, at, depth)?,
            Value::Number(n) => check_number(schema, n.as_f64().unwrap_or(f64::NAN), here)?,
            Value::String(text) => check_string(schema, text, here)?,
            _ => {}
        }
        self.check_composition(schema, value, at, depth)
    }

    fn check_object(
        &self,
        schema: &serde_json::Map<String, Value>,
        object: &serde_json::Map<String, Value>,
        at: &str,
        depth: usize,
    ) -> Result<(), String> {
        let here = if at.is_empty() { "the value" } else { at };
        if let Some(Value::Array(required)) = schema.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    return Err(format!("{here}: the required property `{name}` is missing"));
                }
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (name, item) in object {
            let path = format!("{at}/{}", escape_pointer(name));
            match properties.and_then(|p| p.get(name)) {
                Some(sub) => self.check(sub, item, &path, depth + 1)?,
                None => {
                    if let Some(extra) = schema.get("additionalProperties") {
                        if extra == &Value::Bool(false) {
                            return Err(format!(
                                "{here}: property `{name}` is not allowed (additionalProperties: false)"
                            ));
                        }
                        self.check(extra, item, &path, depth + 1)?;
                    }
                }
            }
        }
        let count = object.len() as u64;
        if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
            && count < min
        {
            return Err(format!(
                "{here}: expected at least {min} properties, got {count}"
            ));
        }
        if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
            && count > max
        {
            return Err(format!(
                "{here}: expected at most {max} properties, got {count}"
            ));
        }
        Ok(())
    }

    fn check_array(
        &self,
        schema: &serde_json::Map<String, Value>,
        items: &[Value],
        at: &str,
        depth: usize,
    ) -> Result<(), String> {
        let here = if at.is_empty() { "the value" } else { at };
        // 2020-12: `prefixItems` then `items` for the rest; draft-07: `items` as a list
        // (with `additionalItems` for the rest) or one schema for all.
        let (prefix, rest) = match (schema.get("prefixItems"), schema.get("items")) {
            (Some(Value::Array(prefix)), rest) => (prefix.as_slice(), rest),
            (_, Some(Value::Array(prefix))) => (prefix.as_slice(), schema.get("additionalItems")),
            (_, rest) => (&[][..], rest),
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("{at}/{i}");
            match prefix.get(i) {
                Some(sub) => self.check(sub, item, &path, depth + 1)?,
                None => {
                    if let Some(rest) = rest {
                        self.check(rest, item, &path, depth + 1)?;
                    }
                }
            }
        }
        let count = items.len() as u64;
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && count < min
        {
            return Err(format!(
                "{here}: expected at least {min} items, got {count}"
            ));
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && count > max
        {
            return Err(format!("{here}: expected at most {max} items, got {count}"));
        }
        if schema.get("uniqueItems") == Some(&Value::Bool(true)) {
            for (i, a) in items.iter().enumerate() {
                if items[..i].iter().any(|b| json_equal(a, b)) {
                    return Err(format!("{here}: expected unique items, got {a} twice"));
                }
            }
        }
        Ok(())
    }

    fn check_composition(
        &self,
        schema: &serde_json::Map<String, Value>,
        value: &Value,
        at: &str,
        depth: usize,
    ) -> Result<(), String> {
        let here = if at.is_empty() { "the value" } else { at };
        let fits = |sub: &Value| self.check(sub, value, at, depth + 1).is_ok();
        if let Some(Value::Array(all)) = schema.get("allOf") {
            for sub in all {
                self.check(sub, value, at, depth + 1)?;
            }
        }
        if let Some(Value::Array(any)) = schema.get("anyOf")
            && !any.iter().any(fits)
        {
            return Err(format!("{here}: fits none of the anyOf schemas"));
        }
        if let Some(Value::Array(one)) = schema.get("oneOf") {
            let fitting = one.iter().filter(|s| fits(s)).count();
            if fitting != 1 {
                return Err(format!(
                    "{here}: expected to fit exactly one of the oneOf schemas, fits {fitting}"
                ));
            }
        }
        if let Some(not) = schema.get("not")
            && fits(not)
        {
            return Err(format!("{here}: fits the schema under `not`"));
        }
        if let Some(condition) = schema.get("if") {
            let branch = if fits(condition) {
                schema.get("then")
            } else {
                schema.get("else")
            };
            if let Some(branch) = branch {
                self.check(branch, value, at, depth + 1)?;
            }
        }
        Ok(())
    }

    /// The subschema a local `$ref` (`#` or `#/json/pointer`) names, if any.
    fn resolve(&self, reference: &str) -> Option<&Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(self.root);
        }
        let decoded: String = pointer.replace("%25", "%");
        self.root.pointer(&decoded)
    }
}

fn check_number(schema: &serde_json::Map<String, Value>, n: f64, here: &str) -> Result<(), String> {
    let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
    if let Some(min) = bound("minimum")
        && n < min
    {
        return Err(format!("{here}: expected at least {min}, got {n}"));
    }
    if let Some(max) = bound("maximum")
        && n > max
    {
        return Err(format!("{here}: expected at most {max}, got {n}"));
    }
    if let Some(min) = bound("exclusiveMinimum")
        && n <= min
    {
        return Err(format!("{here}: expected more than {min}, got {n}"));
    }
    if let Some(max) = bound("exclusiveMaximum")
        && n >= max
    {
        return Err(format!("{here}: expected less than {max}, got {n}"));
    }
    Ok(())
}

fn check_string(
    schema: &serde_json::Map<String, Value>,
    text: &str,
    here: &str,
) -> Result<(), String> {
    let length = text.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && length < min
    {
        return Err(format!(
            "{here}: expected at least {min} characters, got {length}"
        ));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && length > max
    {
        return Err(format!(
            "{here}: expected at most {max} characters, got {length}"
        ));
    }
    Ok(())
}

/// Whether `value` is of the type, or one of the types, named by `types`.
fn type_matches(types: &Value, value: &Value) -> bool {
    match types {
        Value::String(name) => is_type(name, value),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .any(|name| is_type(name, value)),
        _ => true,
    }
}

fn is_type(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => match value {
            Value::Number(n) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        },
        // An unknown type name is the schema's problem, not the value's.
        _ => true,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// JSON equality where 1 and 1.0 are the same number (as JSON Schema has it).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn escape_pointer(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(schema: Value, value: Value) {
        assert_eq!(validate(&schema, &value), Ok(()), "{schema} / {value}");
    }

    fn bad(schema: Value, value: Value, says: &str) {
        let error = validate(&schema, &value).expect_err(&format!("{schema} must refuse {value}"));
        assert!(error.contains(says), "{error}");
    }

    #[test]
    fn objects_properties_and_required() {
        let schema = json!({"type": "object", "properties": {"t": {"type": "number"},
            "c": {"type": "string"}}, "required": ["t", "c"]});
        ok(
            schema.clone(),
            json!({"t": 22.5, "c": "cloudy", "extra": 1}),
        );
        bad(schema.clone(), json!({"t": 22.5}), "`c` is missing");
        bad(
            schema.clone(),
            json!({"t": "hot", "c": "x"}),
            "/t: expected type \"number\"",
        );
        bad(schema, json!([1]), "expected type \"object\"");
        bad(
            json!({"type": "object", "additionalProperties": false, "properties": {"a": {}}}),
            json!({"a": 1, "b": 2}),
            "`b` is not allowed",
        );
        bad(
            json!({"additionalProperties": {"type": "integer"}}),
            json!({"b": 1.5}),
            "/b",
        );
    }

    #[test]
    fn scalars() {
        ok(json!({"type": "integer"}), json!(3));
        ok(json!({"type": "integer"}), json!(3.0));
        bad(json!({"type": "integer"}), json!(3.5), "expected type");
        ok(json!({"type": ["string", "null"]}), json!(null));
        bad(json!({"enum": ["a", "b"]}), json!("c"), "one of");
        ok(json!({"const": 1}), json!(1.0));
        bad(json!({"minimum": 0}), json!(-1), "at least 0");
        bad(json!({"exclusiveMaximum": 10}), json!(10), "less than 10");
        bad(
            json!({"maxLength": 2}),
            json!("✓✓✓"),
            "at most 2 characters",
        );
        ok(json!({"maxLength": 3}), json!("✓✓✓"));
        ok(
            json!({"pattern": "^x$", "format": "email"}),
            json!("anything"),
        );
    }

    #[test]
    fn arrays() {
        let users = json!({"type": "array", "items": {"type": "object", "required": ["id"]}});
        ok(users.clone(), json!([{"id": "1"}, {"id": "2"}]));
        bad(
            users,
            json!([{"id": "1"}, {}]),
            "/1: the required property `id`",
        );
        bad(json!({"minItems": 1}), json!([]), "at least 1 items");
        bad(json!({"uniqueItems": true}), json!([1, 1.0]), "unique");
        ok(
            json!({"prefixItems": [{"type": "string"}], "items": {"type": "integer"}}),
            json!(["a", 1, 2]),
        );
        bad(
            json!({"items": [{"type": "string"}], "additionalItems": false}),
            json!(["a", 1]),
            "/1",
        );
    }

    #[test]
    fn composition_and_references() {
        let schema = json!({"$defs": {"pos": {"type": "number", "minimum": 0}},
            "type": "object", "properties": {"n": {"$ref": "#/$defs/pos"}}});
        ok(schema.clone(), json!({"n": 1}));
        bad(schema, json!({"n": -1}), "/n: expected at least 0");
        bad(
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
            json!(1.5),
            "anyOf",
        );
        bad(
            json!({"oneOf": [{"type": "number"}, {"type": "integer"}]}),
            json!(1),
            "exactly one",
        );
        bad(json!({"not": {"type": "null"}}), json!(null), "`not`");
        bad(
            json!({"if": {"type": "string"}, "then": {"minLength": 2}}),
            json!("a"),
            "at least 2",
        );
        ok(
            json!({"if": {"type": "string"}, "then": {"minLength": 2}}),
            json!(1),
        );
        bad(json!(false), json!(1), "admits nothing");
        ok(json!(true), json!({"anything": [1]}));
        // A schema that refers to itself ends at the depth bound instead of looping.
        assert!(validate(&json!({"$ref": "#"}), &json!(1)).is_err());
        ok(json!({"$ref": "https://example.com/remote.json"}), json!(1));
    }
}
