//! The tools' output schemas, made from the OpenAPI schemas of the REST bodies they answer with,
//! so that a JSON shape is described once for both surfaces. OpenAPI 3.1's schemas are JSON
//! Schema 2020-12, which MCP's `outputSchema` is; only where references point differs: the
//! document's `#/components/schemas/X` becomes `#/$defs/X` inside the one schema.

use std::sync::Arc;

use rmcp::model::JsonObject;
use serde_json::Value;

/// Where OpenAPI keeps the schemas a body refers to.
const COMPONENTS: &str = "#/components/schemas/";
/// Where a self-contained JSON Schema keeps them.
const DEFINITIONS: &str = "#/$defs/";

/// The JSON Schema of what `T` serializes to, with every schema it refers to under `$defs`.
pub fn output_schema<T: utoipa::ToSchema>() -> Arc<JsonObject> {
    let mut referenced = Vec::new();
    T::schemas(&mut referenced);
    let mut root = to_object(&T::schema());
    // MCP asks for an object at the root: a body that flattens another is an `allOf` of
    // objects, which is one, but says so only inside.
    root.entry("type")
        .or_insert_with(|| Value::String("object".to_owned()));
    if !referenced.is_empty() {
        let definitions = referenced
            .iter()
            .map(|(name, schema)| (name.clone(), Value::Object(to_object(schema))))
            .collect();
        root.insert("$defs".to_owned(), Value::Object(definitions));
    }
    point_references_at_definitions(&mut root);
    Arc::new(root)
}

/// A schema as a JSON object (utoipa's schemas always serialize to one).
fn to_object(schema: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(schema) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

/// Rewrites every `$ref` under `object` from the document's components to `$defs`.
fn point_references_at_definitions(object: &mut JsonObject) {
    for (key, value) in object.iter_mut() {
        match value {
            Value::String(target) if key == "$ref" => {
                if let Some(name) = target.strip_prefix(COMPONENTS) {
                    *target = format!("{DEFINITIONS}{name}");
                }
            }
            Value::Object(inner) => point_references_at_definitions(inner),
            Value::Array(items) => {
                for item in items {
                    if let Value::Object(inner) = item {
                        point_references_at_definitions(inner);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Screen;
    use crate::mcp::tools::ScreenReading;
    use crate::rest::bodies::RunAnswerBody;

    /// Every `$ref` in `value`.
    fn references(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(object) => {
                for (key, inner) in object {
                    match inner {
                        Value::String(target) if key == "$ref" => found.push(target.clone()),
                        _ => references(inner, found),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| references(item, found)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves_inside_the_schema() {
        for schema in [
            output_schema::<Screen>(),
            output_schema::<RunAnswerBody>(),
            output_schema::<ScreenReading>(),
        ] {
            let schema = Value::Object(schema.as_ref().clone());
            let mut found = Vec::new();
            references(&schema, &mut found);
            assert!(!found.is_empty(), "these bodies nest others: {schema}");
            for target in found {
                let name = target
                    .strip_prefix(DEFINITIONS)
                    .unwrap_or_else(|| panic!("{target} points outside the schema"));
                assert!(schema["$defs"][name].is_object(), "{target} is not defined");
            }
            assert_eq!(schema["type"], "object");
        }
    }
}
