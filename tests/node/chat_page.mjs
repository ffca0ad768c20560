// The chat page in headless Chromium (puppeteer-core, the system's browser): types a message, sends
// it, waits for the streamed reply to finish, and prints one JSON line with what the page shows.
// usage: node chat_page.mjs PORT CHROMIUM_PATH
import puppeteer from "puppeteer-core";

const [port, chromium] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
let code = 1;
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`http://127.0.0.1:${port}/`, { waitUntil: "load", timeout: 20000 });
  await page.evaluate(() => { document.getElementById("max").value = "40"; });
  await page.type("#input", "hello from the browser");
  // Count the reply's growth while it streams: each content change of the assistant's message.
  await page.evaluate(() => {
    window.__updates = 0;
    new MutationObserver(() => window.__updates++).observe(document.getElementById("log"), { subtree: true, childList: true, characterData: true });
  });
  await page.keyboard.press("Enter");
  await page.waitForSelector(".assistant[data-done='1']", { timeout: 30000 });
  const out = await page.evaluate(() => ({
    user: document.querySelector(".user")?.textContent,
    reply: document.querySelector(".assistant")?.textContent,
    speed: document.getElementById("speed").textContent,
    updates: window.__updates,
    error: document.querySelector(".error")?.textContent || null,
  }));
  // The stop button: a long reply, stopped once it has started.
  await page.evaluate(() => { document.getElementById("max").value = "4000"; });
  await page.type("#input", "a long one");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => (document.querySelectorAll(".assistant")[1]?.textContent || "").length > 0, { timeout: 20000 });
  await page.click("#stop");
  await page.waitForSelector(".assistant:nth-of-type(4)[data-done='1']", { timeout: 20000 });
  out.stopped = (await page.evaluate(() => document.querySelectorAll(".assistant")[1].textContent)).endsWith("[stopped]");
  out.page_errors = errors;
  console.log(JSON.stringify(out));
  code = out.reply && out.reply.length > 0 && !out.error && errors.length === 0 && /t\/s/.test(out.speed) && out.updates > 2 && out.stopped ? 0 : 1;
} finally {
  await browser.close();
}
process.exit(code);
