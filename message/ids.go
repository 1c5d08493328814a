package message

import "strings"

// ToolCallIDs returns the ids of the message's tool calls, in order: what
// the window's repair step pairs with ResultIDs (invariant I4).
func (m Message) ToolCallIDs() []string {
	var ids []string
	for _, p := range m.Parts {
		if p.Type == ToolCall {
			ids = append(ids, p.ToolCallID)
		}
	}
	return ids
}

// ResultIDs returns the ids of the tool calls the message's tool results
// answer, in order.
func (m Message) ResultIDs() []string {
	var ids []string
	for _, p := range m.Parts {
		if p.Type == ToolResult {
			ids = append(ids, p.ToolCallID)
		}
	}
	return ids
}

// ImageSource says where an image part's bytes are, whichever API sent it.
type ImageSource struct {
	// MediaType is the image's MIME type when known ("image/png").
	MediaType string
	// Data is the base64 data of an inline image.
	Data string
	// URL is the image's http(s) URL, for an image sent by reference.
	URL string
	// FileID is the provider's file id, for an Anthropic file source.
	FileID string
}

// ImageSource returns where the image of an Image part is: decoded from the
// Anthropic source object kept in Raw, or from ImageURL (a URL or a data:
// URI). ok is false for a part that is not an image. The token counter reads
// it to size images; nothing is fetched.
func (p Part) ImageSource() (src ImageSource, ok bool) {
	if p.Type != Image {
		return ImageSource{}, false
	}
	if len(p.Raw) > 0 {
		s := scanner{data: p.Raw}
		if as, err := decodeAnthropicSource(&s); err == nil {
			return ImageSource{MediaType: as.mediaType, Data: as.data, URL: as.url, FileID: as.fileID}, true
		}
	}
	if mediaType, data, isData := parseDataURI(p.ImageURL); isData {
		return ImageSource{MediaType: mediaType, Data: data}, true
	}
	if rest, isData := strings.CutPrefix(p.ImageURL, "data:"); isData { // not base64
		mediaType, _, _ := strings.Cut(rest, ",")
		mediaType, _, _ = strings.Cut(mediaType, ";")
		return ImageSource{MediaType: mediaType, URL: p.ImageURL}, true
	}
	return ImageSource{URL: p.ImageURL}, true
}
