// What a table is, shared by clean.js and extract.js (included after formula.js: `// @include tables.js`).
// Three kinds, from the author's markup and the table's cells:
//   layout table  lays content out rather than holding data (isLayoutTable): recorded as its cells'
//                 contents (extract.js), never protected from the clean-up;
//   data table    holds data (isDataTable): recorded as a table with rows, and no clean-up selector or
//                 page rule removes it (clean.js); by definition no layout table;
//   other tables  neither (a navbox's link lists, a box drawn with a one-row table): recorded as tables,
//                 but a clean-up rule may remove them with what holds them.
const LAYOUT_CELL_CONTENT = 'img, svg, canvas, picture, video, figure, table, iframe, object, embed';
const NAVIGATION = 'nav, [role=navigation], [role=banner], [role=contentinfo], [role=search]';

// Whether `table` lays content out: it says so (role presentation or none), or it has no data-table
// markup (<th>, <thead>, <tfoot>, <caption>, MediaWiki's class wikitable) and every cell that holds
// anything holds a picture (img, svg, canvas, picture, video, figure; a formula's own SVG does not
// count), a frame or a nested table: LaTeXML's grids of figure panels, grids of images, spacer tables
// of empty cells. A table with a cell of text alone is no layout table.
function isLayoutTable(table) {
  if (/^(presentation|none)$/i.test((table.getAttribute('role') || '').trim())) return true;
  if (table.caption || table.tHead || table.tFoot || table.classList.contains('wikitable')) return false;
  for (const row of table.rows) {
    for (const cell of row.cells) {
      if (cell.localName === 'th') return false;
      const pictures = Array.from(cell.querySelectorAll(LAYOUT_CELL_CONTENT)).some(d => !formulaOf(d));
      if (!pictures && (cell.textContent || '').trim()) return false;
    }
  }
  return true;
}

// Whether `table` holds data: no layout table, not part of navigation (a navigation landmark), and,
// unless it is a wikitable (MediaWiki's class for data tables: always data), a grid (at least two
// rows holding text, one of them with two cells holding text or more; one row or one column is a box
// drawn with a table) that is no link table (one whose every data cell holding text is links,
// separators aside: a navbox's lists).
function isDataTable(table) {
  if (table.closest(NAVIGATION) || isLayoutTable(table)) return false;
  if (table.classList.contains('wikitable')) return true;
  const bare = s => (s || '').replace(/[\s\u00b7\u2022|,;:()\u2013\u2014-]+/g, '');
  const rows = Array.from(table.rows).map(r => Array.from(r.cells).filter(c => bare(c.textContent))).filter(r => r.length);
  if (rows.length < 2 || !rows.some(r => r.length >= 2)) return false;
  const cells = rows.flat().filter(c => c.localName === 'td');
  const linkText = c => Array.from(c.querySelectorAll('a')).map(a => bare(a.textContent)).join('').length;
  return !cells.length || cells.some(c => linkText(c) < 0.9 * bare(c.textContent).length);
}

// Whether `el` is or holds a data table.
function holdsDataTable(el) {
  return (el.localName === 'table' && isDataTable(el)) || Array.from(el.getElementsByTagName('table')).some(isDataTable);
}
