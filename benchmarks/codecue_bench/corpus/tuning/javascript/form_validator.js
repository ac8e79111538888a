// Declarative form validation: describe each field with rules, get back a map of error messages.

const EMAIL_RE = /^[^\s@]+@[^\s@]+\.[^\s@]{2,}$/;

const rules = {
  required(message = 'This field is required') {
    return (value) => (value === undefined || value === null || String(value).trim() === '' ? message : null);
  },
  minLength(length, message) {
    return (value) =>
      value && String(value).length < length ? message || `Must be at least ${length} characters` : null;
  },
  maxLength(length, message) {
    return (value) =>
      value && String(value).length > length ? message || `Must be at most ${length} characters` : null;
  },
  email(message = 'Enter a valid email address') {
    return (value) => (value && !EMAIL_RE.test(value) ? message : null);
  },
  range(min, max, message) {
    return (value) => {
      if (value === '' || value === undefined) return null;
      const n = Number(value);
      if (Number.isNaN(n)) return 'Must be a number';
      return n < min || n > max ? message || `Must be between ${min} and ${max}` : null;
    };
  },
  matches(otherField, message) {
    // Cross-field rule: receives all values as its second argument.
    return (value, values) => (value !== values[otherField] ? message || `Must match ${otherField}` : null);
  },
};

function validate(values, schema) {
  const errors = {};
  for (const [field, fieldRules] of Object.entries(schema)) {
    for (const rule of fieldRules) {
      const message = rule(values[field], values);
      if (message) {
        errors[field] = message; // first failing rule wins; one message per field is easier to read
        break;
      }
    }
  }
  return { valid: Object.keys(errors).length === 0, errors };
}

const signupSchema = {
  username: [rules.required(), rules.minLength(3), rules.maxLength(20)],
  email: [rules.required(), rules.email()],
  age: [rules.range(13, 120, 'You must be at least 13')],
  password: [rules.required(), rules.minLength(8, 'Use 8 or more characters')],
  confirmPassword: [rules.required('Please confirm your password'), rules.matches('password', 'Passwords do not match')],
};

function bindForm(form, schema, onSubmit) {
  const showErrors = (errors) => {
    for (const input of form.querySelectorAll('[name]')) {
      const hint = form.querySelector(`[data-error-for="${input.name}"]`);
      const message = errors[input.name] || '';
      input.setAttribute('aria-invalid', message ? 'true' : 'false');
      if (hint) hint.textContent = message;
    }
  };

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(form).entries());
    const { valid, errors } = validate(values, schema);
    showErrors(errors);
    if (valid) {
      onSubmit(values);
    } else {
      const firstInvalid = form.querySelector('[aria-invalid="true"]');
      if (firstInvalid) firstInvalid.focus();
    }
  });

  form.addEventListener('input', (event) => {
    const { name } = event.target;
    if (!schema[name]) return;
    const values = Object.fromEntries(new FormData(form).entries());
    const { errors } = validate(values, { [name]: schema[name] });
    showErrors({ ...errors });
  });
}

function selfTest() {
  const good = {
    username: 'ada',
    email: 'ada@example.org',
    age: '36',
    password: 'analytical',
    confirmPassword: 'analytical',
  };
  const bad = { ...good, email: 'ada@', confirmPassword: 'engine' };
  console.assert(validate(good, signupSchema).valid, 'good input should pass');
  const result = validate(bad, signupSchema);
  console.assert(!result.valid, 'bad input should fail');
  console.assert(result.errors.email === 'Enter a valid email address', result.errors.email);
  console.assert(result.errors.confirmPassword === 'Passwords do not match', result.errors.confirmPassword);
}

if (typeof module !== 'undefined') {
  module.exports = { rules, validate, bindForm, signupSchema, selfTest };
}
