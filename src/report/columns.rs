//! Columns declared once per result type, rendered as a text table, CSV and JSON from the same
//! declaration: the JSON key is the CSV header, a CSV cell is the JSON value's text, and the
//! table shows the same columns (or those with a table header) formatted for people.

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::table::Table;

/// One value of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Text.
    Text(String),
    /// An integer (byte counts need u128).
    Int(u128),
    /// A real number (JSON `null` if not finite).
    Real(f64),
    /// A flag.
    Bool(bool),
    /// Names (a JSON array; space-separated in CSV).
    List(Vec<String>),
    /// No value (JSON `null`, an empty CSV cell).
    Missing,
}

impl Cell {
    /// The text of the cell in CSV: the JSON scalar without quotes, empty when missing.
    pub fn csv_text(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            Cell::Int(n) => n.to_string(),
            Cell::Real(x) if x.is_finite() => serde_json::to_string(x).unwrap_or_default(),
            Cell::Real(_) | Cell::Missing => String::new(),
            Cell::Bool(b) => b.to_string(),
            Cell::List(v) => v.join(" "),
        }
    }
}

impl Serialize for Cell {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Cell::Text(t) => s.serialize_str(t),
            Cell::Int(n) => s.serialize_u128(*n),
            Cell::Real(x) => s.serialize_f64(*x),
            Cell::Bool(b) => s.serialize_bool(*b),
            Cell::List(v) => v.serialize(s),
            Cell::Missing => s.serialize_none(),
        }
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Text(s.to_string())
    }
}
impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Text(s)
    }
}
impl From<f64> for Cell {
    fn from(x: f64) -> Cell {
        Cell::Real(x)
    }
}
impl From<bool> for Cell {
    fn from(b: bool) -> Cell {
        Cell::Bool(b)
    }
}
impl From<u128> for Cell {
    fn from(n: u128) -> Cell {
        Cell::Int(n)
    }
}
impl From<u64> for Cell {
    fn from(n: u64) -> Cell {
        Cell::Int(n as u128)
    }
}
impl From<usize> for Cell {
    fn from(n: usize) -> Cell {
        Cell::Int(n as u128)
    }
}
impl From<u8> for Cell {
    fn from(n: u8) -> Cell {
        Cell::Int(n as u128)
    }
}
impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(v: Option<T>) -> Cell {
        v.map_or(Cell::Missing, Into::into)
    }
}

type ValueFn<T> = Box<dyn Fn(&T) -> Cell + Send + Sync>;
type ShowFn<T> = Box<dyn Fn(&T) -> String + Send + Sync>;

/// A column of rows of type `T`.
pub struct Column<T> {
    /// JSON key and CSV header (DESIGN §8 names).
    pub key: &'static str,
    /// Table header; `None` leaves the column out of the table.
    pub header: Option<&'static str>,
    /// Right-aligned in the table (numbers).
    pub right: bool,
    /// The value (JSON and CSV).
    pub value: ValueFn<T>,
    /// The table text; `None` shows the CSV text.
    pub show: Option<ShowFn<T>>,
}

impl<T: 'static> Column<T> {
    /// A column shown in the table as its CSV text.
    pub fn plain(
        key: &'static str,
        header: &'static str,
        right: bool,
        value: impl Fn(&T) -> Cell + Send + Sync + 'static,
    ) -> Self {
        Column {
            key,
            header: Some(header),
            right,
            value: Box::new(value),
            show: None,
        }
    }

    /// A column shown in the table through `show`.
    pub fn shown(
        key: &'static str,
        header: &'static str,
        right: bool,
        value: impl Fn(&T) -> Cell + Send + Sync + 'static,
        show: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        Column {
            key,
            header: Some(header),
            right,
            value: Box::new(value),
            show: Some(Box::new(show)),
        }
    }

    /// A column in CSV and JSON only.
    pub fn data(key: &'static str, value: impl Fn(&T) -> Cell + Send + Sync + 'static) -> Self {
        Column {
            key,
            header: None,
            right: true,
            value: Box::new(value),
            show: None,
        }
    }

    /// The same column over rows of type `R` that contain a `T`.
    pub fn lift<R: 'static>(self, get: fn(&R) -> &T) -> Column<R> {
        let value = self.value;
        Column {
            key: self.key,
            header: self.header,
            right: self.right,
            value: Box::new(move |r: &R| value(get(r))),
            show: self
                .show
                .map(|show| Box::new(move |r: &R| show(get(r))) as ShowFn<R>),
        }
    }
}

/// The rows as a text table (the columns with a table header).
pub fn table<T>(columns: &[Column<T>], rows: &[T]) -> String {
    let shown: Vec<&Column<T>> = columns.iter().filter(|c| c.header.is_some()).collect();
    let headers: Vec<&str> = shown.iter().filter_map(|c| c.header).collect();
    let right: Vec<bool> = shown.iter().map(|c| c.right).collect();
    let mut t = Table::new(&headers, &right);
    for r in rows {
        t.row(
            shown
                .iter()
                .map(|c| match &c.show {
                    Some(f) => f(r),
                    None => (c.value)(r).csv_text(),
                })
                .collect(),
        );
    }
    t.render()
}

/// The CSV header line of `columns`.
pub fn csv_header<T>(columns: &[Column<T>]) -> String {
    csv_line(columns.iter().map(|c| c.key.to_string()))
}

/// One row as a CSV line.
pub fn csv_row<T>(columns: &[Column<T>], row: &T) -> String {
    csv_line(columns.iter().map(|c| (c.value)(row).csv_text()))
}

/// Header and rows as CSV.
pub fn csv<T>(columns: &[Column<T>], rows: &[T]) -> String {
    let mut s = csv_header(columns);
    for r in rows {
        s.push_str(&csv_row(columns, r));
    }
    s
}

fn csv_line(cells: impl Iterator<Item = String>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(cells.collect::<Vec<_>>());
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// A row as a JSON object with the columns' keys, in column order.
pub struct JsonRow<'a, T> {
    columns: &'a [Column<T>],
    row: &'a T,
}

impl<'a, T> JsonRow<'a, T> {
    /// `row` as an object of `columns`.
    pub fn new(columns: &'a [Column<T>], row: &'a T) -> Self {
        JsonRow { columns, row }
    }
}

impl<T> Serialize for JsonRow<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.columns.len()))?;
        for c in self.columns {
            m.serialize_entry(c.key, &(c.value)(self.row))?;
        }
        m.end()
    }
}

/// Rows as a JSON array of objects.
pub fn json_rows<'a, T>(columns: &'a [Column<T>], rows: &'a [T]) -> Vec<JsonRow<'a, T>> {
    rows.iter().map(|r| JsonRow::new(columns, r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct R {
        name: &'static str,
        bytes: u128,
        share: Option<f64>,
    }

    fn columns() -> Vec<Column<R>> {
        type C = Column<R>;
        vec![
            C::plain("name", "name", false, |r| r.name.into()),
            C::shown(
                "bytes",
                "size",
                true,
                |r| r.bytes.into(),
                |r| format!("{} B", r.bytes),
            ),
            C::data("share", |r| r.share.into()),
        ]
    }

    /// One declaration, three renderings that agree: CSV headers are JSON keys, CSV cells the
    /// JSON values' text, the table shows the columns it has headers for.
    #[test]
    fn one_declaration_renders_three_ways() {
        let rows = [
            R {
                name: "a,b",
                bytes: 1 << 70,
                share: Some(0.25),
            },
            R {
                name: "c",
                bytes: 2,
                share: None,
            },
        ];
        assert_eq!(
            csv(&columns(), &rows),
            "name,bytes,share\n\"a,b\",1180591620717411303424,0.25\nc,2,\n"
        );
        let cols = columns();
        let json = serde_json::to_string(&json_rows(&cols, &rows)).unwrap();
        assert_eq!(
            json,
            r#"[{"name":"a,b","bytes":1180591620717411303424,"share":0.25},{"name":"c","bytes":2,"share":null}]"#
        );
        let t = table(&cols, &rows);
        assert_eq!(
            t.lines().next().unwrap().trim_end(),
            "name                      size"
        );
        assert!(t.contains("1180591620717411303424 B") && !t.contains("0.25"));
        // Lifted into a containing row, the same column reads through.
        let outer: Vec<(u8, R)> = rows.into_iter().map(|r| (7, r)).collect();
        let lifted: Vec<Column<(u8, R)>> = columns()
            .into_iter()
            .map(|c| c.lift(|o: &(u8, R)| &o.1))
            .collect();
        assert_eq!(
            csv(&lifted, &outer),
            "name,bytes,share\n\"a,b\",1180591620717411303424,0.25\nc,2,\n"
        );
    }
}
