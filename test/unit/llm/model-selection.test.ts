import { describe, expect, it } from 'vitest';
import { type Catalogue, catalogueSchema } from '../../../src/llm/catalogue.js';
import { selectModel, validateTenantModels } from '../../../src/llm/model-selection.js';

const catalogue: Catalogue = catalogueSchema.parse({
  providers: [{ name: 'openai', kind: 'openai' }],
  models: ['small', 'large', 'huge'].map((name) => ({
    name,
    provider: 'openai',
    modelId: name,
    contextWindow: 1000,
    maxOutputTokens: 100,
  })),
  defaultModel: 'small',
});
const open = { defaultModel: null, allowedModels: null };

describe('selectModel', () => {
  it('takes the request, then the session, then the tenant default, then the system default', () => {
    const tenant = { defaultModel: 'large', allowedModels: null };
    expect(selectModel({ catalogue, tenant, requested: 'huge', session: 'small' })).toBe('huge');
    expect(selectModel({ catalogue, tenant, session: 'small' })).toBe('small');
    expect(selectModel({ catalogue, tenant })).toBe('large');
    expect(selectModel({ catalogue, tenant: open })).toBe('small');
  });

  it('a request naming a model the tenant may not use is a 400 model_not_allowed', () => {
    const tenant = { defaultModel: null, allowedModels: ['small'] };
    expect(() => selectModel({ catalogue, tenant, requested: 'huge' })).toThrow(
      expect.objectContaining({ status: 400, code: 'model_not_allowed' }),
    );
    expect(() => selectModel({ catalogue, tenant: open, requested: 'gpt-99' })).toThrow(
      expect.objectContaining({ status: 400, code: 'unknown_model' }),
    );
  });

  it('skips a session or default model the tenant may no longer use', () => {
    const tenant = { defaultModel: 'large', allowedModels: ['huge'] };
    expect(selectModel({ catalogue, tenant, session: 'small' })).toBe('huge');
  });

  it('a tenant allowed no configured model gets a clear 409', () => {
    const tenant = { defaultModel: null, allowedModels: ['retired'] };
    expect(() => selectModel({ catalogue, tenant })).toThrow(
      expect.objectContaining({ code: 'no_model_allowed' }),
    );
  });
});

describe('validateTenantModels', () => {
  it('rejects unknown names and a default outside the allowed list, naming each field', () => {
    expect(() =>
      validateTenantModels(catalogue, { allowedModels: ['small', 'nope'], defaultModel: 'large' }),
    ).toThrow(
      expect.objectContaining({
        fields: [
          { field: 'body.allowedModels.1', message: 'unknown model "nope"' },
          { field: 'body.defaultModel', message: 'must be one of allowedModels' },
        ],
      }),
    );
    expect(() =>
      validateTenantModels(catalogue, { allowedModels: ['small'], defaultModel: 'small' }),
    ).not.toThrow();
  });
});
