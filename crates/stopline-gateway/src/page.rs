//! The status page shell at `/`: static HTML whose data comes from `/v1/status` with a token the
//! operator types in, and a stop form that posts to `/v1/engage`. It has no recovery control and
//! must never get one: recovery is the owner console's alone.

use axum::response::Html;

/// `GET /`.
pub async fn page() -> Html<&'static str> {
    Html(PAGE)
}

const PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>stopline gateway</title>
<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}pre{background:#f4f4f4;padding:1em;overflow:auto}
fieldset{margin:1em 0}.stop{background:#b00;color:#fff;font-weight:bold;padding:.5em 1.5em;border:0}</style></head>
<body><h1>stopline gateway</h1>
<p>Token: <input id="token" type="password" size="60" autocomplete="off"> <button id="load">Load status</button></p>
<pre id="status">Enter a token to load /v1/status.</pre>
<form id="stop"><fieldset><legend>Stop</legend>
Scope <input id="scope" value="machine" size="30">
Level <select id="level"><option>emergency</option><option>halt-all</option><option>halt-noncritical</option></select>
Reason <input id="reason" size="30" required>
<button class="stop" type="submit">STOP</button></fieldset></form>
<pre id="receipt"></pre>
<p>Recovery is only possible at the owner console (<code>stopline recover</code>), never here.</p>
<script>
const auth=()=>({"Authorization":"Bearer "+document.getElementById("token").value.trim()});
document.getElementById("load").onclick=async()=>{const r=await fetch("/v1/status",{headers:auth()});
document.getElementById("status").textContent=JSON.stringify(await r.json(),null,2)};
document.getElementById("stop").onsubmit=async(e)=>{e.preventDefault();
const body={scope:document.getElementById("scope").value,level:document.getElementById("level").value,reason:document.getElementById("reason").value};
const r=await fetch("/v1/engage",{method:"POST",headers:{...auth(),"Content-Type":"application/json"},body:JSON.stringify(body)});
document.getElementById("receipt").textContent=JSON.stringify(await r.json(),null,2)};
</script></body></html>
"#;
