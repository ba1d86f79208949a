/* The viewer's files embedded in the binary: UI_FILE(symbol, name, type),
 * where symbol is the file name with '.' as '_' (the name ld -r -b binary
 * gives api/ui/<name>), name the path under /ui/ and type its
 * Content-Type.  Every file of api/ui/ but ui.c, ui.h, ui_files.h and
 * README.md is listed here (tests/http/test_viewer.py checks it). */
UI_FILE(index_html, "index.html", "text/html; charset=utf-8")
UI_FILE(viewer_css, "viewer.css", "text/css; charset=utf-8")
UI_FILE(favicon_svg, "favicon.svg", "image/svg+xml")
UI_FILE(main_js, "main.js", "text/javascript; charset=utf-8")
UI_FILE(api_js, "api.js", "text/javascript; charset=utf-8")
UI_FILE(colors_js, "colors.js", "text/javascript; charset=utf-8")
UI_FILE(scatter_js, "scatter.js", "text/javascript; charset=utf-8")
UI_FILE(table_js, "table.js", "text/javascript; charset=utf-8")
UI_FILE(tree_js, "tree.js", "text/javascript; charset=utf-8")
