// rnnprof's tab in TensorBoard: a run selector and the selected run's page, served by the plugin (plugin.py).
// Everything comes from this TensorBoard: nothing loads from the network.
export async function render() {
  document.body.style.margin = '0';
  const bar = document.createElement('div');
  bar.style.cssText = 'padding:8px 16px;font-family:system-ui,sans-serif;border-bottom:1px solid #ddd';
  const label = document.createElement('label');
  label.textContent = 'run ';
  const select = document.createElement('select');
  select.id = 'rnnprof-run';
  label.appendChild(select);
  bar.appendChild(label);
  const page = document.createElement('div');
  page.id = 'rnnprof-page';
  page.style.cssText = 'padding:0 16px';
  document.body.append(bar, page);
  const runs = await fetch('./runs').then((r) => r.json());
  if (!runs.length) {
    page.textContent = 'No rnnprof run directory in this logdir (rnnprof trace makes them).';
    return;
  }
  for (const run of runs) {
    const option = document.createElement('option');
    option.value = option.textContent = run;
    select.appendChild(option);
  }
  async function show(run) {
    page.setAttribute('data-state', 'loading');
    page.textContent = `Analysing ${run}…`;
    const response = await fetch('./run?name=' + encodeURIComponent(run));
    page.innerHTML = await response.text();
    page.setAttribute('data-run', run);
    page.setAttribute('data-state', response.ok ? 'shown' : 'failed');
  }
  select.addEventListener('change', () => show(select.value));
  await show(runs[0]);
}
