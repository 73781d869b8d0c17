// Render the math that pymdownx.arithmatex (generic mode) leaves in the page as
// \( ... \) and \[ ... \], and the $ ... $ of notebook pages, with KaTeX. KaTeX itself
// is installed by npm and published with the site by hooks/book.py (no CDN).
// document$ is Material's page observable, so this also runs after instant navigation.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false,
  });
});
