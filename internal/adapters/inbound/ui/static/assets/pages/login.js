// Login: the API key this tab uses. It is checked against the API before
// it is kept (in sessionStorage: gone when the tab closes), and sent as
// Authorization: Bearer on every call. Behind a proxy that adds the header
// itself, or in open mode, nobody is sent here.

import { api, setKey, getKey, RETURN_KEY, REASON_KEY } from '../api.js';
import { h, text } from '../dom.js';
import { toast } from '../ui.js';

export default {
  id: 'login',
  nav: '',
  title: 'Sign in',
  create(ctx) {
    let reason = { message: '', refused: false };
    try {
      reason = JSON.parse(sessionStorage.getItem(REASON_KEY)) || reason;
    } catch {
      // none, or not ours
    }
    sessionStorage.removeItem(REASON_KEY);
    const key = h('input', {
      id: 'login-key',
      class: 'input',
      type: 'password',
      name: 'key',
      autocomplete: 'off',
      spellcheck: 'false',
      required: true,
      'data-test': 'login-key',
      'aria-describedby': 'login-help',
    });
    const submit = h('button', { type: 'submit', class: 'btn btn-primary', 'data-test': 'login-submit' }, 'Sign in');
    const error = h('p', { class: 'login-error', 'data-test': 'login-error', role: 'alert', hidden: true });
    const mode = h('p', { class: 'muted' });
    // Why the API asked for a key, worth saying only in open mode: a pool
    // token (AQUIFER_POOL_TOKEN) guards the pool endpoints there.
    const asked = h('p', { class: 'muted small', hidden: true }, 'The API answered: ' + reason.message);
    const form = h(
      'form',
      { class: 'login-form' },
      h('label', { for: 'login-key' }, 'API key'),
      key,
      h(
        'p',
        { id: 'login-help', class: 'muted small' },
        'A tenant’s key shows its own jobs; an admin key (role: admin) shows every tenant’s and may pause lanes. ',
        'The key stays in this tab only (sessionStorage) and goes to this Aquifer as Authorization: Bearer.',
      ),
      error,
      submit,
    );
    ctx.main.append(h('section', { class: 'card login' }, h('h1', null, 'Sign in to Aquifer'), mode, asked, form));
    if (reason.refused) {
      text(error, 'The API refused the key: ' + reason.message);
      error.hidden = false;
    }

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const k = key.value.trim();
      if (!k) return;
      submit.disabled = true;
      error.hidden = true;
      try {
        // Any operator read proves the key: a tenant's and an admin's both list jobs.
        await api('/jobs?limit=1', { key: k });
        setKey(k);
        const back = sessionStorage.getItem(RETURN_KEY) || '#/overview';
        sessionStorage.removeItem(RETURN_KEY);
        toast('Signed in.', 'ok');
        ctx.go(back.startsWith('#/login') ? '#/overview' : back);
      } catch (err) {
        text(error, err.status === 401 ? 'The API refused this key: ' + err.message : err.message);
        error.hidden = false;
        key.select();
      } finally {
        submit.disabled = false;
      }
    });

    return {
      interval: () => 30000,
      async refresh(signal) {
        const doc = await api('/health', { accept: [503], signal, key: '' });
        ctx.session.health(doc);
        asked.hidden = doc.auth !== 'open' || !reason.message || reason.refused;
        if (doc.auth === 'open') {
          text(mode, 'This Aquifer is in open mode: no key is needed (a key entered here is sent anyway, e.g. a pool token).');
        } else {
          text(mode, getKey() ? 'A key is in use in this tab; enter another to switch.' : 'This Aquifer requires an API key.');
        }
        if (document.activeElement === document.body || !document.activeElement) key.focus();
      },
    };
  },
};
