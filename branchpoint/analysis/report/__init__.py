"""The Markdown and HTML report: sections, plots and the writer."""
