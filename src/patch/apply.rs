//! Applying patch operations to an envelope: all or nothing. Ops run on a copy; the copy
//! replaces the envelope only when every op applied and validated.

use bytes::Bytes;
use serde_json::{json, Value};

use super::ops::{HandlerResult, Op, PartSpec, Selector};
use super::refusal::{ApplyReport, OpOutcome, PatchRefusal, RefusalReason};
use crate::envelope::{Element, Envelope, MsgKind, SystemPart, Wire};
use crate::providers::{check_boundary, tool_name};

type OpResult = Result<(), RefusalReason>;

impl Envelope {
    /// Apply a handler's result; its `transformerName` wins over `default_transformer`.
    pub fn apply_result(
        &mut self,
        result: &HandlerResult,
        default_transformer: &str,
    ) -> Result<ApplyReport, PatchRefusal> {
        let name = result
            .transformer_name
            .as_deref()
            .unwrap_or(default_transformer);
        self.apply(&result.patch, name)
    }

    /// Apply a whole patch or nothing of it.
    pub fn apply(&mut self, ops: &[Op], transformer: &str) -> Result<ApplyReport, PatchRefusal> {
        let mut work = self.clone();
        let report = work.apply_in_place(ops, transformer)?;
        *self = work;
        Ok(report)
    }

    /// [`Envelope::apply`] on this envelope itself: a refused op leaves the ops before it
    /// applied, so the caller applies to a copy it drops on refusal. Shaping applies a
    /// patch's ops one at a time this way, on one copy per patch rather than one per op.
    pub(crate) fn apply_in_place(
        &mut self,
        ops: &[Op],
        transformer: &str,
    ) -> Result<ApplyReport, PatchRefusal> {
        let mut report = ApplyReport {
            transformer: transformer.to_owned(),
            ops: Vec::new(),
        };
        for (i, op) in ops.iter().enumerate() {
            let refuse = |reason: RefusalReason| {
                let what = match &reason {
                    RefusalReason::MissingInvalidateReason => {
                        op.check_reason().err().unwrap_or_default()
                    }
                    RefusalReason::InvalidOp(s)
                    | RefusalReason::BadSelector(s)
                    | RefusalReason::BadElement(s)
                    | RefusalReason::ProviderRule(s) => s.clone(),
                    RefusalReason::UnknownTool(t) => format!("no tool named `{t}`"),
                    RefusalReason::UnknownPart(p) => format!("no system part named `{p}`"),
                    RefusalReason::NotAnOption(k) => format!("`{k}` is not an option"),
                };
                PatchRefusal::new(transformer, Some(i), Some(op), reason, what)
            };
            if op.check_reason().is_err() {
                return Err(refuse(RefusalReason::MissingInvalidateReason));
            }
            apply_op(self, op).map_err(refuse)?;
            report.ops.push(OpOutcome {
                op: op.name(),
                scope: op.scope(),
                invalidate_reason: op.invalidate_cache_reason().map(str::to_owned),
            });
        }
        Ok(report)
    }
}

impl Envelope {
    /// The history position `at` resolves to in this envelope. Only
    /// `before_last_user_prompt` reads the history's turns: a replayed insert has its index.
    pub(crate) fn position_of(&self, at: Selector) -> Option<usize> {
        let prompt = match at {
            Selector::BeforeLastUserPrompt => self.last_user_prompt_index(),
            Selector::Index(_) | Selector::End => None,
        };
        at.position(self.history_len(), prompt)
    }
}

fn apply_op(env: &mut Envelope, op: &Op) -> OpResult {
    match op {
        Op::SystemPartSet {
            part_name,
            text,
            before,
            after,
            ..
        } => set_part(env, part_name, text, before.as_deref(), after.as_deref()),
        Op::SystemPartRemove { part_name, .. } => {
            let i = part_index(env, part_name)?;
            env.system.remove(i);
            env.system_dirty = true;
            Ok(())
        }
        Op::SystemPartsReplace { parts, .. } => {
            replace_parts(env, parts);
            Ok(())
        }
        Op::ToolsReplace { tools, .. } => {
            env.tools = tools
                .iter()
                .map(|t| tool_element(env.wire, t))
                .collect::<Result<_, _>>()?;
            env.tools_dirty = true;
            Ok(())
        }
        Op::ToolsRemove { names, .. } => {
            for name in names {
                let at = env.tools.iter().position(|t| {
                    tool_name(env.endpoint(), env.bytes_of(&t.raw)).as_deref() == Some(name)
                });
                let at = at.ok_or_else(|| RefusalReason::UnknownTool(name.clone()))?;
                env.tools.remove(at);
            }
            env.tools_dirty = true;
            Ok(())
        }
        Op::MessagesCachedReplace { messages, .. } => {
            let new = convert_all(env.wire, messages)?;
            check_sequence(env, None, &new, env.uncached.first())?;
            env.cached = new;
            env.messages_dirty = true;
            Ok(())
        }
        Op::MessagesInsert { at, messages, .. } => insert(env, at, messages),
        Op::MessagesUncachedAppend { messages, .. } => {
            let new = convert_all(env.wire, messages)?;
            let prev = env.uncached.last().or(env.cached.last()).cloned();
            check_sequence(env, prev.as_ref(), &new, None)?;
            env.uncached.extend(new);
            Ok(())
        }
        Op::OptionsSet { options, .. } => {
            for (key, value) in options {
                if env.wire.owned_keys().contains(&key.as_str()) {
                    return Err(RefusalReason::NotAnOption(key.clone()));
                }
                let raw = (!value.is_null())
                    .then(|| Bytes::from(serde_json::to_vec(value).unwrap_or_default()));
                env.option_edits.push((key.clone(), raw));
            }
            Ok(())
        }
    }
}

fn part_index(env: &Envelope, name: &str) -> Result<usize, RefusalReason> {
    env.system
        .iter()
        .position(|p| p.name == name)
        .ok_or_else(|| RefusalReason::UnknownPart(name.to_owned()))
}

fn set_part(
    env: &mut Envelope,
    name: &str,
    text: &str,
    before: Option<&str>,
    after: Option<&str>,
) -> OpResult {
    env.system_dirty = true;
    if let Some(i) = env.system.iter().position(|p| p.name == name) {
        let part = &mut env.system[i];
        if part.text != text {
            part.text = text.to_owned();
            part.rewritten = true;
        }
        return Ok(());
    }
    let part = SystemPart::new(name.to_owned(), text.to_owned(), None);
    let at = match (before, after) {
        (Some(b), _) => part_index(env, b)?,
        (None, Some(a)) => part_index(env, a)? + 1,
        (None, None) => env.system.len(),
    };
    env.system.insert(at, part);
    Ok(())
}

/// Replace all parts, keeping the client's bytes for parts that did not change, and the
/// client's block (its marker) for a same-named part whose text did.
fn replace_parts(env: &mut Envelope, parts: &[PartSpec]) {
    let old = std::mem::take(&mut env.system);
    env.system = parts
        .iter()
        .map(|spec| {
            let same = old.iter().find(|p| p.name == spec.name);
            let mut part = SystemPart::new(
                spec.name.clone(),
                spec.text.clone(),
                same.and_then(|p| p.element.clone()),
            );
            part.rewritten = same.is_some_and(|p| p.rewritten || p.text != spec.text);
            part
        })
        .collect();
    env.system_dirty = true;
}

/// A tool from a patch: neutral `{name, description, parameters}` or the provider's shape.
fn tool_element(wire: &dyn Wire, tool: &Value) -> Result<Element, RefusalReason> {
    let obj = tool
        .as_object()
        .ok_or_else(|| RefusalReason::BadElement("a tool must be a JSON object".into()))?;
    let neutral =
        obj.contains_key("name") && obj.contains_key("parameters") && !obj.contains_key("type");
    let value = if neutral {
        let (name, desc, params) = (
            &obj["name"],
            obj.get("description").cloned().unwrap_or(json!("")),
            &obj["parameters"],
        );
        wire.to_wire_tool(name, &desc, params)
    } else {
        tool.clone()
    };
    let bytes = serde_json::to_vec(&value).map_err(|e| RefusalReason::BadElement(e.to_string()))?;
    if tool_name(wire.endpoint(), &bytes).is_none() && !obj.contains_key("type") {
        return Err(RefusalReason::BadElement("a tool needs a name".into()));
    }
    Ok(Element::new(Bytes::from(bytes)))
}

fn convert_all(wire: &dyn Wire, messages: &[Value]) -> Result<Vec<Element>, RefusalReason> {
    messages
        .iter()
        .map(|m| {
            let v = wire.to_wire_message(m).map_err(RefusalReason::BadElement)?;
            let bytes =
                serde_json::to_vec(&v).map_err(|e| RefusalReason::BadElement(e.to_string()))?;
            Ok(Element::new(Bytes::from(bytes)))
        })
        .collect()
}

/// Check the provider's ordering rules over `prev`, `new…`, `next`.
fn check_sequence(
    env: &Envelope,
    prev: Option<&Element>,
    new: &[Element],
    next: Option<&Element>,
) -> OpResult {
    let kind = |e: &Element| env.kind_of(e);
    let mut kinds: Vec<Option<MsgKind>> = Vec::with_capacity(new.len() + 2);
    kinds.push(prev.map(kind));
    kinds.extend(new.iter().map(|e| Some(kind(e))));
    kinds.push(next.map(kind));
    for pair in kinds.windows(2) {
        if pair[0].is_none() && pair[1].is_none() {
            continue;
        }
        check_boundary(env.endpoint(), pair[0].as_ref(), pair[1].as_ref())
            .map_err(RefusalReason::ProviderRule)?;
    }
    Ok(())
}

fn insert(env: &mut Envelope, at: &Selector, messages: &[Value]) -> OpResult {
    let len = env.cached.len();
    let index = env.position_of(*at).ok_or_else(|| {
        RefusalReason::BadSelector(match at {
            Selector::BeforeLastUserPrompt => "the history has no user prompt".into(),
            Selector::Index(n) => {
                format!("index {n} is past the end of the history ({len} messages)")
            }
            Selector::End => "the history has no end".into(),
        })
    })?;
    let injected = *at == Selector::BeforeLastUserPrompt;
    let mut new = convert_all(env.wire, messages)?;
    let prev = index
        .checked_sub(1)
        .and_then(|i| env.cached.get(i))
        .cloned();
    let next = if index < len {
        env.cached.get(index)
    } else {
        env.uncached.first()
    }
    .cloned();
    check_sequence(env, prev.as_ref(), &new, next.as_ref())?;
    for m in &mut new {
        m.injected = injected;
    }
    env.cached.splice(index..index, new);
    env.messages_dirty = true;
    Ok(())
}
