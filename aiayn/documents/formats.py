"""The formats aiayn.documents reads, by extension (nothing imported: `aiayn translate` asks this before choosing a
path, and the server lists it in /frontend/settings)."""

# extension -> (module, class): the document classes, each with .blocks and .write(path_out, translated, target)
FORMATS = {
    ".txt": ("text", "TextDocument"),
    ".md": ("markdown", "MarkdownDocument"),
    ".srt": ("srt", "SrtDocument"),
    ".html": ("epub", "HtmlFile"),
    ".htm": ("epub", "HtmlFile"),
    ".xhtml": ("epub", "HtmlFile"),
    ".docx": ("ooxml", "OfficeDocument"),
    ".pptx": ("ooxml", "OfficeDocument"),
    ".odt": ("odf", "OdfDocument"),
    ".odp": ("odf", "OdfDocument"),
    ".epub": ("epub", "EpubDocument"),
}
SUPPORTED = tuple(FORMATS)
MACRO_ENABLED = (".docm", ".pptm", ".xlsm", ".dotm", ".potm", ".ppsm")
