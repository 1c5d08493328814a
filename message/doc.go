// Package message defines Mneme's API-neutral conversation message and the
// codecs that turn it to and from the two wire formats the proxy speaks:
// OpenAI Chat Completions messages and Anthropic Messages.
//
// Its one job is lossless translation: decoding what a client sent and
// encoding it back to the same API gives JSON-equal output, unknown fields
// included, and translating between the APIs keeps text, tool calls, tool
// results and their pairing. The codecs parse each request in a single pass
// with a small validating scanner, because the proxy decodes every request.
//
// What the codecs keep in Wire, beyond the comments on its fields:
//
//   - Extra holds every member a codec does not model, re-emitted as it
//     came, and also modeled members whose value cannot be told from their
//     absence ("name": "", "is_error": false, "detail": ""). For a nested
//     object the Message models in part (an OpenAI tool call's "function",
//     an image part's "image_url"), Extra[key] holds that object's unmodeled
//     members only. Modeled values always win over Extra.
//   - Part Form "string" on an OpenAI image: image_url came as a bare URL
//     string. Part Form "json" on an OpenAI tool call: arguments came as a
//     JSON value instead of a string. Part Form on an Anthropic tool_result:
//     how its content was spelled.
//   - Part Type keeps the provider type of an Opaque part, "custom" for an
//     OpenAI custom tool call, "redacted_thinking" for Anthropic's.
//
// Wire is used only when encoding back to the API that decoded the message
// (or for messages built in Go, Wire.API ""). Translating to the other API
// gives that API's canonical shape and leaves out what it cannot take:
// the other API's unknown fields (except cache_control, which Anthropic
// takes), opaque parts, reasoning (OpenAI's has no signature, Anthropic's
// means nothing to OpenAI), Anthropic's is_error, images with no URL (file
// sources). Tool call arguments that are not a JSON object go to Anthropic
// as {"_raw": "..."} and come back unwrapped.
//
// The package must import nothing but the standard library: every other
// package of Mneme imports it.
package message
