// Verifies webhook deliveries with the official Standard Webhooks library
// (npm "standardwebhooks"), for TestOfficialStandardWebhooksLibrary.
//
//   node verify.cjs <install dir>  < cases.json  > results.json
//
// <install dir> holds node_modules/standardwebhooks. stdin is a JSON list of
// cases: {"name", "secret", "headers": {name: value}, "body_base64",
// "clock_offset_seconds"}. Each case is verified as a receiver would, with
// new Webhook(secret).verify(body, headers); clock_offset_seconds moves the
// library's clock (Date.now) forward, as if the delivery arrived that much
// later. stdout is {"version", "results": [{"name", "ok", "error"}]}.
"use strict";

const fs = require("node:fs");
const path = require("node:path");

const dir = process.argv[2];
if (!dir) {
	process.stderr.write("usage: node verify.cjs <install dir> < cases.json\n");
	process.exit(2);
}
const lib = path.join(dir, "node_modules", "standardwebhooks");
const { Webhook } = require(lib);
const version = JSON.parse(fs.readFileSync(path.join(lib, "package.json"), "utf8")).version;

const cases = JSON.parse(fs.readFileSync(0, "utf8"));
const realNow = Date.now;
const results = cases.map((c) => {
	Date.now = () => realNow() + (c.clock_offset_seconds || 0) * 1000;
	try {
		new Webhook(c.secret).verify(Buffer.from(c.body_base64, "base64"), c.headers);
		return { name: c.name, ok: true, error: "" };
	} catch (e) {
		return { name: c.name, ok: false, error: String(e && e.message) };
	} finally {
		Date.now = realNow;
	}
});
process.stdout.write(JSON.stringify({ version, results }));
