//! The style sheet of the lab's HTML pages (report.html and the wan-matrix page).

/// The style sheet every page shares.
pub(crate) const CSS: &str =
    "body{font-family:sans-serif;margin:24px;color:#111827;max-width:1100px}\
table{border-collapse:collapse;font-size:13px;margin:12px 0}\
td,th{border:1px solid #d1d5db;padding:5px 8px;text-align:left;vertical-align:top}\
th{background:#f3f4f6}.PASS{color:#15803d;font-weight:bold}.FAIL{color:#b91c1c;font-weight:bold}\
h2{margin-top:36px;border-bottom:1px solid #e5e7eb}p.note{color:#4b5563;font-size:13px}\
svg{border:1px solid #e5e7eb;background:#fff;max-width:100%;height:auto}";
